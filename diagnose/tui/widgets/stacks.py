"""Top stacks as a collapsible tree (root frame first) with each node's share of sampled time."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree

from diagnose.tui.viewmodels import StackNodeVM

EXPAND_PCT = 10.0  # open the hot paths; colder branches stay folded


class StacksTree(Tree[str]):
    def __init__(self, nodes: tuple[StackNodeVM, ...] = (), **kw):
        super().__init__("top stacks", **kw)
        self.show_root = False
        self._initial_vm = nodes

    def on_mount(self) -> None:
        self.show(self._initial_vm)

    def show(self, nodes: tuple[StackNodeVM, ...], needle: str = "") -> int:
        """Rebuild the tree; with ``needle`` keep only paths with a frame containing it.
        Returns the number of leaves shown."""
        self.clear()
        kept = _filter(nodes, needle.lower()) if needle else nodes
        count = sum(self._add(self.root, n) for n in kept)
        self.root.expand()
        return count

    def _add(self, parent, node: StackNodeVM) -> int:
        label = Text.assemble((f"{node.share_pct:5.1f}% ", "bold"), node.label)
        if node.category:
            label.append(f"  [{node.category}]", style="dim")
        if not node.children:
            parent.add_leaf(label, data=node.label)
            return 1
        branch = parent.add(label, data=node.label, expand=node.share_pct >= EXPAND_PCT)
        return sum(self._add(branch, c) for c in node.children)


def _filter(nodes: tuple[StackNodeVM, ...], needle: str) -> tuple[StackNodeVM, ...]:
    out = []
    for n in nodes:
        if needle in n.label.lower() or needle in (n.category or ""):
            out.append(n)
            continue
        kids = _filter(n.children, needle)
        if kids:
            out.append(StackNodeVM(n.label, sum(k.share_pct for k in kids), n.category, kids))
    return tuple(out)
