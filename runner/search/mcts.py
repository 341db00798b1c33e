"""Solution-level Monte Carlo tree search (KernelPro, Algorithm 1).

A virtual ROOT holds the baseline and fresh seeds (mode init). Selection descends by UCT with
C = sqrt(2); progressive widening lets a node have at most C_pw * N^0.5 children (C_pw = 2 at ROOT
and failed nodes, 3 at working ones), and a virtual child, valued at the node's own mean, competes
with the real children so a promising node is widened rather than only deepened. Failed nodes are
expanded in debug mode; after 3 failed repairs a node is terminal, and a node whose children are
all terminal and that cannot widen is terminal too.

A resumed run first rebuilds the tree from the journal's history: each evaluation hangs under its
parent (an init candidate of the baseline under ROOT), with the same backpropagation and terminal
marking as when it was first evaluated, so the search continues where it stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import Evaluate, History, Propose, Scored

C_UCT = math.sqrt(2.0)
C_PW_WORKING = 3.0
C_PW_OTHER = 2.0
MAX_FAILED_REPAIRS = 3


@dataclass
class Node:
    """A tree node; ``scored`` is None only for the virtual ROOT."""

    scored: Scored | None
    """The evaluated candidate."""
    parent: Node | None = None
    """Up the tree."""
    children: list[Node] = field(default_factory=list)
    """Down the tree."""
    visits: int = 0
    """Backpropagations through this node."""
    value: float = 0.0
    """Sum of rewards backpropagated through this node."""
    terminal: bool = False
    """Nothing more to gain here."""
    exhausted: bool = False
    """The programmer had nothing new to propose from this node."""

    @property
    def working(self) -> bool:
        return self.scored is not None and self.scored.outcome.passed

    @property
    def mean(self) -> float:
        return self.value / self.visits if self.visits else 0.0

    def width_limit(self) -> float:
        c = C_PW_WORKING if self.working else C_PW_OTHER
        return c * math.sqrt(max(self.visits, 1))

    def uct(self, parent_visits: int) -> float:
        if self.visits == 0:
            return math.inf
        return self.mean + C_UCT * math.sqrt(math.log(max(parent_visits, 1)) / self.visits)


def _mode(node: Node) -> str:
    if node.scored is None:
        return "init"
    return "optimize" if node.working else "debug"


def _backprop(node: Node | None, reward: float) -> None:
    while node is not None:
        node.visits += 1
        node.value += reward
        node = node.parent


def _mark_terminal(node: Node | None) -> None:
    while node is not None and node.scored is not None:
        failed_repairs = sum(1 for c in node.children if not c.working)
        if not node.working and failed_repairs >= MAX_FAILED_REPAIRS or node.children and all(c.terminal for c in node.children) and node.exhausted or node.exhausted and not node.children:
            node.terminal = True
        if not node.terminal:
            return
        node = node.parent


def _select(root: Node) -> Node:
    node = root
    while True:
        live = [c for c in node.children if not c.terminal]
        can_widen = not node.exhausted and len(node.children) < node.width_limit()
        if not live:
            return node
        best = max(live, key=lambda c: c.uct(node.visits))
        if can_widen:
            # The virtual child: an unexplored sibling valued at this node's mean, seen once.
            virtual = node.mean + C_UCT * math.sqrt(math.log(max(node.visits, 1)))
            if virtual >= best.uct(node.visits):
                return node
        node = best


def _rebuild(root: Node, base: Node, history: History) -> None:
    by_key = {base.scored.candidate.key: base} if base.scored is not None else {}
    for s in history:
        cand = s.candidate
        if cand.mode == "init" and cand.parent == _key_of(base):
            parent = root
        else:
            # An evaluation whose parent is unknown (another programmer's journal) counts as a seed.
            parent = by_key.get(cand.parent or "", root)
        child = Node(s, parent=parent)
        parent.children.append(child)
        by_key[cand.key] = child
        _backprop(child, s.reward)
        _mark_terminal(parent)


def _key_of(base: Node) -> str:
    return base.scored.candidate.key if base.scored is not None else ""


def mcts(root_scored: Scored, propose: Propose, evaluate: Evaluate, n: int, history: History = ()) -> None:
    root = Node(None)
    base = Node(root_scored, parent=root)
    root.children.append(base)
    _backprop(base, root_scored.reward)
    _rebuild(root, base, history)
    while True:
        leaf = _select(root)
        if leaf is root and root.exhausted and all(c.terminal for c in root.children):
            return
        if leaf.terminal or (leaf is root and root.exhausted):
            return
        parent_scored = leaf.scored if leaf.scored is not None else root_scored
        cands = propose(parent_scored, _mode(leaf), n)
        if not cands:
            leaf.exhausted = True
            if leaf is root:
                if all(c.terminal for c in root.children):
                    return
                continue
            _mark_terminal(leaf)
            continue
        for cand in cands:
            scored = evaluate(cand)
            if scored is None:
                return
            child = Node(scored, parent=leaf)
            leaf.children.append(child)
            _backprop(child, scored.reward)
        _mark_terminal(leaf)
