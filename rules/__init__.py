"""Rule registry: every rule diagnose evaluates, and the layer plan of each quadrant."""
from diagnose.model import Layer, Quadrant
from diagnose.rules.base import Condition, Rule
from diagnose.rules.batching import BATCHING_RULES
from diagnose.rules.cpu import CPU_RULES
from diagnose.rules.gpu import GPU_RULES
from diagnose.rules.serving import SERVING_RULES
from diagnose.rules.timeline import TIMELINE_RULES

RULES: tuple[Rule, ...] = CPU_RULES + GPU_RULES + TIMELINE_RULES + BATCHING_RULES + SERVING_RULES

# Where to act, in order, once a quadrant is known (DESIGN.md, "change one layer at a time").
LAYER_PLAN: dict[Quadrant, tuple[Layer, ...]] = {
    Quadrant.COMPUTE: (Layer.MODEL, Layer.ENGINE, Layer.SYSTEM),
    Quadrant.BANDWIDTH: (Layer.MODEL, Layer.ENGINE, Layer.SERVICE),
    Quadrant.SERVICE: (Layer.SERVICE, Layer.SYSTEM, Layer.ENGINE),
    Quadrant.IO: (Layer.SYSTEM, Layer.SERVICE),
}

__all__ = ["Condition", "LAYER_PLAN", "RULES", "Rule"]
