"""The pure-Python solver's exact finish: (17) on a merged problem solved from a guess of its order, by the
partitioning algorithm for isotonic regression on a partial order.

(17) is isotonic regression on a partial order (a DAG on the grid), and its optimum is piecewise constant,
each piece (a block) at its weighted mean of t. A guess (Dykstra's iterate, `_isotonic`) orders the cells
into a linear extension of the order; PAV on that sequence gives blocks (the isotonic regression under the
total order, feasible for (17)); the KKT conditions of isotonic regression on a partial order (nonnegative
multipliers on a block's edges balance w (x - t) at each cell) hold iff no block has an upper subset
(closed under the block's own edges) whose w (t - mean) sums above 0, and a dynamic programme over the rows
finds each block's best such subset exactly (`_violations`: a block is convex, so it meets each row in one
run of columns and an upper subset takes a suffix of each). A block that has one is split (Maxwell and
Muckstadt 1985; Spouge, Wan and Wilbur 2003; the subset found is Hochbaum and Queyranne's 2003 minimum
cut) and PAV pools the sequence again, until the KKT test passes: the answer is then (17)'s optimum up to
rounding. PAV can pool back what a round split, so the rounds are capped (`ROUNDS`) and the caller tries
again from a better guess where they do not settle.
"""

from __future__ import annotations

import numpy as np

from autosync.policies.dbw._eq17 import ROUNDING, Problem

# The partition's rounds before it gives up. On DBW's recorded instances (bench_dbw_solver.py) a solve's
# partitions took 13 rounds in all on average at n = 128 (at most 21); at n = 512 a few of them reached
# this cap (the solve then sweeps on and tries again, which settled every one).
ROUNDS = 50


def partition(problem: Problem, guess: np.ndarray, rounds: int = ROUNDS) -> tuple[np.ndarray | None, int]:
    """(17) on a merged problem solved exactly from a feasible guess: the partitioning algorithm for
    isotonic regression on a partial order (Maxwell and Muckstadt 1985; Spouge, Wan and Wilbur 2003).

    The cells are sorted by the guess into a linear extension of (17)'s order (ties broken by k - h,
    then k + h, which every edge increases), and scipy's PAV on that sequence pools them into blocks,
    each set to its weighted mean of t: the isotonic regression under the stronger total order, which is
    feasible for (17). It is (17)'s optimum iff every block passes the KKT test for isotonic regression on
    a partial order: no upper subset of the block (closed under the block's own edges) has w (t - mean)
    summing above 0 (equivalently, nonnegative multipliers on the block's edges balance w (x - t) at each
    cell). `_violations` finds the worst such subset of every block exactly; a block that has one is
    split in the sequence, the rest of the block first (the subset is upper within the block, so the
    sequence stays a linear extension), and PAV pools again. Returns the solution (m x n) and the rounds
    run; None for the solution if the rounds did not settle it.
    """
    from scipy.optimize import isotonic_regression

    m, n = problem.t.shape
    t, w = problem.t.ravel(), problem.w.ravel()
    h, k = np.divmod(np.arange(m * n), n)
    extension = np.lexsort((k + h, k - h))
    order = extension[np.argsort(guess.ravel()[extension], kind="stable")]
    floor = float(np.abs(t).max()) * problem.w
    ends = problem.starts[1:] - 1  # merged row j's last diagonal cell is (j, ends[j]), followed by (j + 1, ends[j] + 1)
    x = np.empty(m * n)
    label = np.empty(m * n, dtype=np.intp)
    # Blocks that passed the test (as start * (m n + 1) + end in the sequence), in the round they did, and
    # the round in which each place of the sequence last changed its cell.
    passed, passed_in = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.intp)
    changed = np.zeros(m * n, dtype=np.intp)
    for r in range(1, rounds + 1):
        fit = isotonic_regression(t[order], weights=w[order])
        block = np.repeat(np.arange(fit.blocks.size - 1), np.diff(fit.blocks))
        x[order] = fit.x
        label[order] = block
        # A block of the same places as one that passed, none of them changed since, passes again: the
        # test runs on the rows of the others.
        code = fit.blocks[:-1] * (m * n + 1) + fit.blocks[1:]
        at = np.searchsorted(passed, code).clip(max=max(passed.size - 1, 0))
        known = (passed[at] == code) if passed.size else np.zeros(code.size, dtype=bool)
        fresh = ~known | (np.maximum.reduceat(changed, fit.blocks[:-1]) >= passed_in[at] if passed.size else True)
        gain = w * (t - x)
        gain[~fresh[label]] = 0.0
        rows = np.flatnonzero(fresh[label].reshape(m, n).any(axis=1))
        if rows.size == 0:  # not seen: a failed block always changes the sequence (its subset is no suffix)
            return x.reshape(m, n), r
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        upper = _violations(label.reshape(m, n)[lo:hi], gain.reshape(m, n)[lo:hi], floor[lo:hi], ends[lo:hi - 1])
        if upper is None:
            return x.reshape(m, n), r
        failed = np.zeros(m * n, dtype=bool)
        failed.reshape(m, n)[lo:hi] = upper
        new = fresh & ~(np.bincount(label, weights=failed, minlength=code.size) > 0)
        passed, first = np.unique(np.concatenate([code[new], passed]), return_index=True)
        passed_in = np.concatenate([np.full(int(new.sum()), r), passed_in])[first]
        reordered = order[np.argsort(2 * block + failed[order], kind="stable")]
        changed[reordered != order] = r
        order = reordered
    return None, rounds


def _violations(label: np.ndarray, gain: np.ndarray, floor: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """The cells of each block's upper subset of largest total gain, for the blocks where it exceeds the
    rounding (a mask, m x n), or None where no block has one.

    Args:
        label: (m, n) block of each cell of a merged problem; each block convex in (17)'s order.
        gain: (m, n) gains, w (t - mean of the block).
        floor: (m, n) w max |t|, the scale of the rounding of the means.
        ends: merged row j's last diagonal cell is (j, ends[j]), followed by (j + 1, ends[j] + 1).

    A convex block meets each row in one run of columns, so an upper subset of it takes a suffix c_j..
    of each of its rows; the block's own edges between rows j - 1 and j only ask c_{j-1} <= max(c_j, lo)
    where c_j <= hi ([lo, hi] the columns both rows of the block share) and, for a diagonal edge
    (j - 1, e) -> (j, e + 1) inside the block, c_{j-1} > e where c_j > e + 1. The best subset is then a
    dynamic programme over the rows, run for all blocks at once: a block's runs in consecutive rows form
    chains (no edge of the block joins two chains), and the states of row j are each run's columns
    ("from here on") and one state "none" after them, laid end to end.
    """
    m, n = gain.shape
    change = np.ones((m, n), dtype=bool)
    change[:, 1:] = label[:, 1:] != label[:, :-1]
    run_row, run_first = np.nonzero(change)  # the runs of equal labels along the rows, row-major
    runs = run_row.size
    run_last = np.append(run_first[1:], n) - 1
    run_last[np.append(run_row[1:] != run_row[:-1], True)] = n - 1
    row_runs = np.searchsorted(run_row, np.arange(m + 1))
    rank = np.arange(runs) - row_runs[run_row]  # a run's place in its row
    run_label = label[run_row, run_first]
    by_label = np.lexsort((run_row, run_label))
    linked = ((run_label[by_label[1:]] == run_label[by_label[:-1]])
              & (run_row[by_label[1:]] == run_row[by_label[:-1]] + 1))
    pred = np.full(runs, -1)  # the run of the same block in the row before
    pred[by_label[1:][linked]] = by_label[:-1][linked]
    chain = np.empty(runs, dtype=np.intp)
    chain[by_label] = np.cumsum(np.concatenate([[True], ~linked])) - 1
    last = np.ones(runs, dtype=bool)  # the last run of its chain
    last[pred[pred >= 0]] = False
    # States: row j's n + (its runs) states start at offset[j]; state `states` is "nothing before".
    offset = np.concatenate([[0], np.cumsum(n + np.diff(row_runs))])
    states = int(offset[-1])
    cell_run = np.repeat(np.arange(runs), run_last - run_first + 1)
    cols = np.tile(np.arange(n), m)
    cell_state = offset[np.repeat(np.arange(m), n)] + cols + rank[cell_run]
    none_state = offset[run_row] + run_last + 1 + rank
    state_run = np.empty(states, dtype=np.intp)
    state_run[cell_state] = cell_run
    state_run[none_state] = np.arange(runs)
    state_col = np.empty(states, dtype=np.intp)
    state_col[cell_state] = cols
    state_col[none_state] = run_last + 1
    # A row's gain from column k to its run's end.
    suffix = np.append(np.cumsum(gain[:, ::-1], axis=1)[:, ::-1].ravel(), 0.0)
    value = np.zeros(states)
    value[cell_state] = suffix[:-1] - suffix[np.where(run_last + 1 < n, run_row * n + run_last + 1, m * n)][cell_run]
    # The states of the row before that a state may follow: its run's states up to `limit`.
    r, p = state_run, pred[state_run]
    lo = np.maximum(run_first[r], run_first[p])
    hi = np.minimum(run_last[r], run_last[p])
    limit = np.where((lo <= hi) & (state_col <= hi), np.maximum(state_col, lo), run_last[p] + 1)
    at = np.where(p >= 0, offset[run_row[p]] + limit + rank[p], states)
    diagonal = {}
    for j in range(1, m):
        e = int(ends[j - 1])
        if e + 1 < n:
            r = cell_run[j * n + e + 1]
            p = pred[r]
            if p >= 0 and run_first[p] <= e <= run_last[p]:
                # c_{j-1} > e where c_j > e + 1: a prefix maximum of row j - 1's run from column e + 1 on
                start = offset[j - 1] + e + 1 + rank[p]
                targets = np.arange(cell_state[j * n + e + 1] + 1, none_state[r] + 1)
                diagonal[j] = (start, none_state[p] + 1, targets, at[targets] - start)
    best = np.zeros(states + 1)  # prefix maxima within runs, and the states that reach them
    best_at = np.full(states + 1, -1, dtype=np.intp)
    f = np.empty(states)
    followed = {}  # the diagonal's targets: the state of the row before each follows
    place = np.empty(states, dtype=np.intp)
    run_key = rank[state_run] * (n + runs + 1)
    count = np.arange(n + runs + 1)
    bounds = offset.tolist()
    for j in range(m):
        a, b = bounds[j], bounds[j + 1]
        np.add(value[a:b], best.take(at[a:b]), out=f[a:b])
        if j in diagonal:
            start, stop, targets, k = diagonal[j]
            sub = f[start:stop]
            top = np.maximum.accumulate(sub)
            reach = np.maximum.accumulate(np.where(sub == top, np.arange(sub.size), 0))
            f[targets] = value[targets] + top[k]
            followed[j] = start + reach[k]
        # prefix maxima within each run by ranks (exact; ties go to the later state, the smaller subset)
        order = np.argsort(f[a:b], kind="stable")
        key = place[a:b]
        key[order] = count[:b - a]
        key += run_key[a:b]
        np.maximum.accumulate(key, out=key)
        key -= run_key[a:b]
        arg = order.take(key)
        arg += a
        f.take(arg, out=best[a:b])
        best_at[a:b] = arg
    ends_of = np.flatnonzero(last)
    chain_index = np.empty(ends_of.size, dtype=np.intp)
    chain_index[chain[ends_of]] = np.arange(ends_of.size)
    cell_chain = chain_index[chain[cell_run]]
    scale = np.bincount(cell_chain, weights=(np.abs(gain) + floor).ravel(), minlength=ends_of.size)
    bad = best[none_state[ends_of]] > ROUNDING * scale
    if not bad.any():
        return None
    back = best_at[at]  # the state of the row before that each state follows
    for j, states_before in followed.items():
        back[diagonal[j][2]] = states_before
    choice = np.full(runs, -1, dtype=np.intp)  # each run's chosen state
    choice[ends_of] = best_at[none_state[ends_of]]
    for j in range(m - 1, 0, -1):
        here = np.arange(row_runs[j], row_runs[j + 1])
        here = here[pred[here] >= 0]
        choice[pred[here]] = back[choice[here]]
    upper = (cols >= state_col[choice][cell_run]) & bad[cell_chain]
    return upper.reshape(m, n)

