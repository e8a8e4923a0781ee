"""The JSON Schema of findings.json, generated: ``data_quality``, ``details``, the verdict's ``gains`` and
an account's ``busiest`` thread from their msgspec types (diagnose/results/quality.py DataQuality,
diagnose/results/details.py Details, diagnose/results/gain.py: ``msgspec.json.schema_components``),
the rest of the document (``CORE``: the capture's identity and the verdict, findings, signals, account,
threads and stacks of diagnose/model.py, which encode themselves with ``to_json``) written here once.

``python -m diagnose.render.findings_schema`` writes the shipped file (diagnose/render/findings-v1.schema.json);
tests/render/test_findings_schema.py checks the shipped file is the generated one and that every fixture's
findings.json validates against it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from diagnose.render.findings_json import FINDINGS_SCHEMA_VERSION, SCHEMA_FILE
from diagnose.results.details import Details
from diagnose.results.gain import BusiestThread, PredictedGain
from diagnose.results.quality import DataQuality

SHIPPED = Path(__file__).with_name(SCHEMA_FILE)
REF = "#/$defs/{name}"

# Everything but data_quality and details (those come from their types, below).
CORE: dict[str, Any] = {'$schema': 'https://json-schema.org/draft/2020-12/schema',
 '$id': 'diagnose/findings-v1.schema.json',
 'title': 'diagnose findings.json, version 1',
 'description': 'The machine-readable analysis of one bundle. Version 1 only ever gains keys '
                '(additionalProperties stay open); a key is never renamed or removed without a new version.',
 'type': 'object',
 'required': ['findings_schema_version', 'schema_version', 'tool_version', 'target', 'capture', 'collectors',
              'verdict', 'account', 'findings', 'signals', 'not_judged', 'top_stacks', 'threads',
              'data_quality', 'details'],
 'properties': {'findings_schema_version': {'const': 1},
                'schema_version': {'type': ['integer', 'null']},
                'tool_version': {'type': 'string'},
                'target': {'type': ['object', 'null']},
                'capture': {'type': 'object',
                            'required': ['started_ns', 'ended_ns', 'end_reason', 'partial'],
                            'properties': {'started_ns': {'type': ['integer', 'null']},
                                           'ended_ns': {'type': ['integer', 'null']},
                                           'end_reason': {'type': ['string', 'null']},
                                           'partial': {'type': ['boolean', 'null']},
                                           'cost': {'description': 'What the capture cost the host '
                                                                   '(diagnose/capture/cost.py): wall_s, '
                                                                   'diagnose_cpu_s, children_cpu_s (s), '
                                                                   'max_rss_bytes (bytes), host_cpus.',
                                                    'type': 'object',
                                                    'properties': {'wall_s': {'type': 'number', 'minimum': 0},
                                                                   'diagnose_cpu_s': {'type': 'number',
                                                                                      'minimum': 0},
                                                                   'children_cpu_s': {'type': 'number',
                                                                                      'minimum': 0},
                                                                   'max_rss_bytes': {'type': 'integer',
                                                                                     'minimum': 0},
                                                                   'host_cpus': {'type': 'integer',
                                                                                 'minimum': 1}}},
                                           'host': {'description': 'The capturing host: os, machine, cpu, '
                                                                   'cpus, memory_bytes.',
                                                    'type': 'object'},
                                           'budget': {'description': 'The overhead budget '
                                                                     '(diagnose/capture/budget.py): '
                                                                     'pct_of_core, asked and final rates, '
                                                                     'changes with their reasons, '
                                                                     'used_pct_of_core_max.',
                                                      'type': 'object'}}},
                'collectors': {'type': 'array', 'items': {'type': 'object', 'required': ['name', 'state']}},
                'verdict': {'type': 'object',
                            'required': ['quadrant', 'layer', 'scores', 'confidence', 'headline',
                                         'mixed_with', 'account', 'confidence_reason', 'remedy', 'dedicated',
                                         'gains'],
                            'properties': {'quadrant': {'enum': ['compute', 'bandwidth', 'service', 'io',
                                                                 'no_load', 'unknown']},
                                           'layer': {'enum': ['model', 'engine', 'service', 'system', None]},
                                           'scores': {'type': 'object',
                                                      'required': ['compute', 'bandwidth', 'service', 'io'],
                                                      'additionalProperties': {'type': 'number',
                                                                               'minimum': 0,
                                                                               'maximum': 1}},
                                           'confidence': {'type': 'number', 'minimum': 0, 'maximum': 1},
                                           'headline': {'type': 'string', 'minLength': 1},
                                           'mixed_with': {'enum': ['compute', 'bandwidth', 'service', 'io',
                                                                   None]},
                                           'account': {'enum': ['threads', 'gpu', 'requests', 'torch_ops',
                                                                None]},
                                           'confidence_reason': {'type': 'string'},
                                           'remedy': {'type': ['string', 'null']},
                                           'dedicated': {'anyOf': [{'type': 'null'},
                                                                   {'type': 'object',
                                                                    'required': ['quadrant', 'layer', 'remedy',
                                                                                 'lead', 'headline'],
                                                                    'properties': {
                                                                        'quadrant': {'enum': [
                                                                            'compute', 'bandwidth', 'service',
                                                                            'io', 'no_load', 'unknown']},
                                                                        'layer': {'enum': ['model', 'engine',
                                                                                           'service', 'system',
                                                                                           None]},
                                                                        'remedy': {'type': ['string', 'null']},
                                                                        'lead': {'type': ['string', 'null']},
                                                                        'headline': {'type': 'string'}}}]}}},
                'account': {'type': 'array', 'items': {'$ref': '#/$defs/account'}},
                'findings': {'type': 'array', 'items': {'$ref': '#/$defs/finding'}},
                'signals': {'type': 'object', 'additionalProperties': {'$ref': '#/$defs/signal'}},
                'not_judged': {'type': 'array',
                               'items': {'type': 'object',
                                         'required': ['what', 'reason'],
                                         'properties': {'what': {'type': 'string'},
                                                        'reason': {'type': 'string'}}}},
                'top_stacks': {'type': 'array',
                               'items': {'type': 'object',
                                         'required': ['thread', 'frames', 'category', 'share_pct', 'seconds'],
                                         'properties': {'frames': {'type': 'array',
                                                                   'items': {'type': 'string'}},
                                                        'share_pct': {'type': 'number',
                                                                      'minimum': 0,
                                                                      'maximum': 100}}}},
                'threads': {'type': 'array',
                            'items': {'type': 'object',
                                      'required': ['tid', 'name', 'cpu_pct', 'dominant_category', 'sampled_s',
                                                   'wait_state']}}},
 '$defs': {'quadrant_or_none': {'enum': ['compute', 'bandwidth', 'service', 'io', 'no_load', 'host',
                                         'stopped']},
           'account': {'type': 'object',
                       'required': ['resource', 'title', 'unit', 'source', 'total_s', 'terms',
                                    'not_attributed', 'notes', 'observations'],
                       'properties': {'resource': {'enum': ['threads', 'gpu', 'requests', 'torch_ops']},
                                      'total_s': {'type': 'number', 'minimum': 0},
                                      'not_attributed': {'type': 'number', 'minimum': 0, 'maximum': 1},
                                      'notes': {'type': 'array', 'items': {'type': 'string'}},
                                      'observations': {'type': ['integer', 'null'], 'minimum': 0},
                                      'terms': {'type': 'array',
                                                'items': {'type': 'object',
                                                          'required': ['kind', 'label', 'share', 'seconds',
                                                                       'quadrant', 'layer', 'evidence',
                                                                       'rule_id'],
                                                          'properties': {'share': {'type': 'number',
                                                                                   'minimum': 0,
                                                                                   'maximum': 1},
                                                                         'seconds': {'type': 'number',
                                                                                     'minimum': 0},
                                                                         'quadrant': {'$ref': '#/$defs/quadrant_or_none'},  # noqa: E501
                                                                         'layer': {'enum': ['model', 'engine',
                                                                                            'service',
                                                                                            'system', None]},
                                                                         'rule_id': {'type': ['string',
                                                                                              'null']}}}}}},
           'finding': {'type': 'object',
                       'required': ['rule_id', 'title', 'summary', 'quadrant', 'layer', 'severity',
                                    'confidence', 'evidence', 'suggestions'],
                       'properties': {'quadrant': {'enum': ['compute', 'bandwidth', 'service', 'io',
                                                            'secondary']},
                                      'layer': {'enum': ['model', 'engine', 'service', 'system']},
                                      'severity': {'enum': ['info', 'warning', 'critical']},
                                      'confidence': {'type': 'number', 'minimum': 0, 'maximum': 1},
                                      'evidence': {'type': 'array',
                                                   'items': {'type': 'object',
                                                             'required': ['signal', 'value', 'unit', 'op',
                                                                          'threshold', 'source'],
                                                             'properties': {'value': {'type': 'number'},
                                                                            'threshold': {'type': 'number'},
                                                                            'op': {'enum': ['>=', '<=']}}}},
                                      'suggestions': {'type': 'array', 'items': {'type': 'string'}}}},
           'signal': {'type': 'object',
                      'required': ['value', 'unit', 'source'],
                      'properties': {'value': {'type': ['number', 'null']},
                                     'unit': {'type': 'string'},
                                     'source': {'type': 'string'},
                                     'reason': {'type': 'string'}}},
           'ranks': {'description': 'Job analysis of several ranks (diagnose/ranks): per-rank temporal '
                                    'breakdown and verdict, stragglers, collective time split into true '
                                    'communication and synchronisation skew, and the job verdict. Times in '
                                    'ns.',
                     'type': 'object',
                     'required': ['world', 'ranks', 'stragglers', 'collectives', 'verdict', 'notes'],
                     'properties': {'world': {'type': 'integer', 'minimum': 2},
                                    'ranks': {'type': 'array',
                                              'items': {'type': 'object',
                                                        'required': ['rank', 'file', 'verdict', 'verdict_pct',
                                                                     'collectives', 'steps'],
                                                        'properties': {'rank': {'type': 'integer'},
                                                                       'file': {'type': 'string'},
                                                                       'verdict': {'enum': ['compute',
                                                                                            'communication',
                                                                                            'memcpy', 'idle',
                                                                                            'no_gpu']},
                                                                       'verdict_pct': {'type': ['number',
                                                                                                'null']},
                                                                       'collectives': {'type': 'integer'},
                                                                       'steps': {'type': 'integer'},
                                                                       'span_ns': {'type': 'integer'},
                                                                       'compute_ns': {'type': 'integer'},
                                                                       'communication_ns': {'type': 'integer'},
                                                                       'memcpy_ns': {'type': 'integer'},
                                                                       'other_ns': {'type': 'integer'},
                                                                       'idle_ns': {'type': 'integer'},
                                                                       'compute_pct': {'type': ['number',
                                                                                                'null']},
                                                                       'communication_pct': {'type': ['number',
                                                                                                      'null']},
                                                                       'memcpy_pct': {'type': ['number',
                                                                                               'null']},
                                                                       'idle_pct': {'type': ['number',
                                                                                             'null']},
                                                                       'other_pct': {'type': ['number',
                                                                                              'null']}}}},
                                    'stragglers': {'type': 'array',
                                                   'items': {'type': 'object',
                                                             'required': ['rank', 'collectives_matched',
                                                                          'last_arrivals',
                                                                          'collective_lag_ns',
                                                                          'steps_matched', 'step_lag_ns',
                                                                          'lag_ns', 'wait_ns', 'straggler'],
                                                             'properties': {'rank': {'type': 'integer'},
                                                                            'collectives_matched': {'type': 'integer'},
                                                                            'last_arrivals': {'type': 'integer'},
                                                                            'collective_lag_ns': {'type': ['integer',
                                                                                                           'null']},
                                                                            'steps_matched': {'type': 'integer'},
                                                                            'step_lag_ns': {'type': ['integer',
                                                                                                     'null']},
                                                                            'lag_ns': {'type': 'integer'},
                                                                            'wait_ns': {'type': 'integer'},
                                                                            'straggler': {'type': 'boolean'},
                                                                            'clock_offset_ns': {'description': 'This '
                                                                                                               "rank's "
                                                                                                               'host '
                                                                                                               'clock '
                                                                                                               'ahead '
                                                                                                               'of '
                                                                                                               'the '
                                                                                                               "others' "  # noqa: E501
                                                                                                               'by '
                                                                                                               'this '
                                                                                                               'much '
                                                                                                               '(its '
                                                                                                               'lag '
                                                                                                               'unexplained '  # noqa: E501
                                                                                                               'by '
                                                                                                               'any '
                                                                                                               'wait '
                                                                                                               'at '
                                                                                                               'collectives); '  # noqa: E501
                                                                                                               'its '
                                                                                                               'times '
                                                                                                               'were '
                                                                                                               'aligned '  # noqa: E501
                                                                                                               'before '
                                                                                                               'comparing. '  # noqa: E501
                                                                                                               'null: '
                                                                                                               'none.',
                                                                                                'type': ['integer',
                                                                                                         'null']}}}},
                                    'collectives': {'oneOf': [{'type': 'null'},
                                                              {'type': 'object',
                                                               'required': ['matched_by', 'collectives',
                                                                            'unmatched', 'comm_ns',
                                                                            'true_comm_ns', 'skew_ns',
                                                                            'skew_pct'],
                                                               'properties': {'matched_by': {'enum': ['seq',
                                                                                                      'occurrence']},
                                                                              'collectives': {'type': 'integer'},
                                                                              'unmatched': {'type': 'integer'},
                                                                              'comm_ns': {'type': 'integer'},
                                                                              'true_comm_ns': {'type': 'integer'},
                                                                              'skew_ns': {'type': 'integer'},
                                                                              'skew_pct': {'type': ['number',
                                                                                                    'null']}}}]},
                                    'verdict': {'type': 'object',
                                                'required': ['bound', 'ranks', 'headline'],
                                                'properties': {'bound': {'enum': ['straggler', 'sync_skew',
                                                                                  'communication',
                                                                                  'per_rank']},
                                                               'ranks': {'type': 'array',
                                                                         'items': {'type': 'integer'}},
                                                               'headline': {'type': 'string'}}},
                                    'notes': {'type': 'array', 'items': {'type': 'string'}}}}}}


def findings_schema_document() -> dict[str, Any]:
    """The whole schema: CORE with ``data_quality`` and ``details`` generated from their types; a
    job of several ranks (``details.ranks``, diagnose/ranks/model.py JobAnalysis.to_json) is
    CORE's ``$defs/ranks``."""
    (dq, details, gain, busiest), components = msgspec.json.schema_components(
        (DataQuality, Details, PredictedGain, BusiestThread), ref_template=REF)
    doc: dict[str, Any] = json.loads(json.dumps(CORE))  # a deep copy
    doc["$id"] = f"diagnose/{SCHEMA_FILE}"
    doc["title"] = f"diagnose findings.json, version {FINDINGS_SCHEMA_VERSION}"
    doc["properties"]["findings_schema_version"] = {"const": FINDINGS_SCHEMA_VERSION}
    doc["properties"]["data_quality"] = dq
    doc["properties"]["details"] = details
    doc["properties"]["verdict"]["properties"]["gains"] = {"type": "array", "items": gain}
    doc["$defs"]["account"]["properties"]["busiest"] = busiest
    ranks = components["Details"]["properties"]["ranks"]
    components["Details"]["properties"]["ranks"] = {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/ranks"}],
                                                    "default": ranks.get("default")}
    clash = set(components) & set(doc["$defs"])
    if clash:
        raise ValueError(f"type names clash with CORE's $defs: {sorted(clash)}")
    doc["$defs"] = {**doc["$defs"], **dict(sorted(components.items()))}
    return doc


def schema_text() -> str:
    """The shipped file's text: the generated document, indented, keys in their order."""
    return json.dumps(findings_schema_document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the shipped schema (or the path given)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else SHIPPED
    path.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["CORE", "findings_schema_document", "main", "schema_text"]
