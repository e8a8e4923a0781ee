"""Stage catalog: which span names/attributes mean which service stage. Data, not code.

A span is classified by the first pattern that matches (order matters: ``detokenize`` is
postprocess before ``tokeniz`` can call it preprocess). ``attribute`` patterns match when the span
carries that attribute key (OpenTelemetry semantic conventions: ``db.system``, ``rpc.system``,
``messaging.system``, ``http.request.method``/``http.method`` on client spans).
"""
from __future__ import annotations

from dataclasses import dataclass


class Stage:
    QUEUE = "queue"
    PREPROCESS = "preprocess"
    MODEL = "model"
    POSTPROCESS = "postprocess"
    NETWORK = "network"
    DB = "db"


STAGES = (Stage.QUEUE, Stage.PREPROCESS, Stage.MODEL, Stage.POSTPROCESS, Stage.NETWORK, Stage.DB)


@dataclass(frozen=True)
class StagePattern:
    stage: str
    name: str | None = None  # regex (re.search) on the span name
    attribute: str | None = None  # the span has this attribute key
    kind: str | None = None  # and this span kind


STAGE_CATALOG: tuple[StagePattern, ...] = (
    StagePattern(Stage.DB, attribute="db.system"),
    StagePattern(Stage.QUEUE, attribute="messaging.system", kind="consumer"),
    StagePattern(Stage.NETWORK, attribute="rpc.system", kind="client"),
    StagePattern(Stage.NETWORK, attribute="http.request.method", kind="client"),
    StagePattern(Stage.NETWORK, attribute="http.method", kind="client"),
    StagePattern(Stage.QUEUE, name=r"(?i)queue|waiting|wait_for|scheduling|schedule|admission|batch[_ ]?wait|pending"),
    StagePattern(Stage.POSTPROCESS, name=r"(?i)post[-_ ]?process|serializ|detokeni|decode_output|format_response|encode_response|render|to_json|response"),
    StagePattern(Stage.PREPROCESS, name=r"(?i)pre[-_ ]?process|tokeni[sz]|parse_request|deserializ|decode_image|transform|featuri[sz]|prepare|validate|load_input"),
    StagePattern(Stage.MODEL, name=r"(?i)model|infer|forward|predict|generat|prefill|decode_step|engine|execute|embed|llm|backbone"),
    StagePattern(Stage.DB, name=r"(?i)\b(db|sql|redis|mongo|postgres|mysql|cache)\b|query|SELECT|INSERT"),
    StagePattern(Stage.NETWORK, name=r"(?i)\b(http|grpc|rpc|fetch|download|upload|s3|gcs|blob|request_to|call_)\b"),
)

# LLM attributes (OpenTelemetry gen_ai conventions and the names vLLM/TGI use), seconds unless noted.
TTFT_ATTRIBUTES = ("gen_ai.server.time_to_first_token", "gen_ai.latency.time_to_first_token")
TPOT_ATTRIBUTES = ("gen_ai.server.time_per_output_token", "gen_ai.latency.time_per_output_token")
OUTPUT_TOKEN_ATTRIBUTES = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                           "llm.usage.completion_tokens")
FIRST_TOKEN_EVENT = r"(?i)first[_ .-]?token"
# Numeric attributes that measure a request's size, compared between the tail and all requests.
SIZE_ATTRIBUTES = r"(?i)(size|bytes|length|tokens|count|batch|items|num_)"

__all__ = ["FIRST_TOKEN_EVENT", "OUTPUT_TOKEN_ATTRIBUTES", "SIZE_ATTRIBUTES", "STAGES", "STAGE_CATALOG",
           "Stage", "StagePattern", "TPOT_ATTRIBUTES", "TTFT_ATTRIBUTES"]
