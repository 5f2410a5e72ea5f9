"""The shell tests' one reader of metrics files, and the comparisons of the equivalence tests.

A metrics file holds one JSON record per line, its "type" saying what it is (train, eval, sample,
memory, overflow, stop, ...). records() gives them in file order, optionally only those of one
type; train_values() gives one field of the train records by step, and losses() their losses, the
last record of each step winning (a resumed run appends the steps after its checkpoint again).
The tests under tests/cli, tests/mpi and tests/gpu read metrics through these (tests/lib/common.sh's
train_losses too), with PYTHONPATH="$SRC/tests/lib".

Runs compares runs of the equivalence tests (tests/mpi/): a run NAME wrote WORK/NAME.jsonl. check()
compares every step's loss, and step 1's gradient norm, of a run with a reference run; check_text()
also compares the validation losses and the sampled text; check_resumed() compares a resumed run's
steps with an uninterrupted run. Problems collect in `bad`; finish() prints them and exits 1 if
there are any.
"""
import json
import sys


def records(path, kind=None):
    """The records of the metrics file at path in file order; with kind, only those of that type."""
    with open(path) as f:
        return [r for r in map(json.loads, f) if kind is None or r["type"] == kind]


def train_values(path, field):
    """step -> field of the train records at path, the last record of each step winning."""
    return {r["step"]: r[field] for r in records(path, "train")}


def losses(path):
    """step -> loss of the train records at path, the last record of each step winning."""
    return train_values(path, "loss")


class Runs:
    def __init__(self, work, steps):
        self.work, self.steps, self.bad = work, steps, []

    def records(self, name, kind):
        return records(f"{self.work}/{name}.jsonl", kind)

    def figures(self, name, field):
        out = train_values(f"{self.work}/{name}.jsonl", field)
        assert sorted(out) == list(range(1, self.steps + 1)), f"{name}: steps {sorted(out)}"
        return [out[s] for s in sorted(out)]

    def check(self, a, b, tol):
        w = max(abs(x - y) / abs(y) for x, y in zip(self.figures(a, "loss"), self.figures(b, "loss")))
        # Step 1's gradient norm (the same weights and batch; each replicated parameter counted
        # once) agrees as closely as its loss. Later norms drift further than the losses: Adam
        # turns the last-bit differences of near-zero gradients into whole steps of them.
        g = abs(self.figures(a, "grad_norm")[0] / self.figures(b, "grad_norm")[0] - 1)
        print(f"{a:>20} vs {b:<10} max relative loss difference {w:.2e} (tolerance {tol:.0e}), "
              f"step 1 gradient norm {g:.2e}")
        if w > tol:
            self.bad.append(f"{a} vs {b}: {w:.2e} > {tol:.0e}")
        if g > min(tol, 1e-6) and tol < 1e-2:
            self.bad.append(f"{a} vs {b}: step 1 gradient norm {g:.2e}")

    def check_text(self, a, b, tol, eval_steps):
        """check(), and a's validation losses within tol of b's at eval_steps, the same samples."""
        self.check(a, b, tol)
        want = {r["step"]: r["val_loss"] for r in self.records(b, "eval")}
        sample = [r.get("text", r.get("tokens")) for r in self.records(b, "sample")]
        assert sorted(want) == eval_steps and len(sample) == 1, (want, sample)
        got = {r["step"]: r["val_loss"] for r in self.records(a, "eval")}
        w = max(abs(got[s] - want[s]) / want[s] for s in want)
        mine = [r.get("text", r.get("tokens")) for r in self.records(a, "sample")]
        print(f"{a:>20}: evaluation within {w:.2e}, sample {'identical' if mine == sample else 'DIFFERS'}")
        if w > tol:
            self.bad.append(f"{a}: val loss {w:.2e} > {tol:.0e}")
        if mine != sample:
            self.bad.append(f"{a}: sample {mine} != {sample}")

    def losses(self, name):
        """step -> loss, the last record of each step winning (a resumed run repeats steps)."""
        return losses(f"{self.work}/{name}.jsonl")

    def check_resumed(self, name, ref, first_step, tol):
        """name's losses at steps first_step..steps within tol of the uninterrupted run ref."""
        want, got = self.losses(ref), self.losses(name)
        if sorted(got) != list(range(first_step, self.steps + 1)):
            self.bad.append(f"{name}: steps {sorted(got)}")
        worst = max(abs(got[s] - want[s]) / abs(want[s]) for s in got)
        print(f"{name:>20}: max relative difference to the uninterrupted run {ref} {worst:.2e} (tolerance {tol:.0e})")
        if worst > tol:
            self.bad.append(f"{name}: {worst:.2e} > {tol:.0e}")

    def finish(self):
        if self.bad:
            print("\n".join(self.bad))
            sys.exit(1)
