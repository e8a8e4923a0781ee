"""Typed results of an analysis besides its verdict: ``DataQuality`` (how well the capture measured,
one section per signal source: quality.py) and ``Details`` (the tables renderers read, one section per
source: details.py and the modules it names). msgspec Structs, standard library and msgspec only, so
the data model (diagnose/model.py) and every stage can import them; findings.json encodes them as they
are (diagnose/render/findings_doc.py) and its JSON Schema is generated from them."""
