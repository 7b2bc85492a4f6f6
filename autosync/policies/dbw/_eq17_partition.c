/* DBW's problem (17), solved exactly by isotonic recursive partitioning.

   minimize  sum_{h,k} w[h,k] (x[h,k] - t[h,k])^2
   subject to  x[h,k] <= x[h,k+1]      (rows nondecreasing)
               x[h+1,k] <= x[h,k]      (columns nonincreasing)
               x[k,k] <= x[k+1,k+1]    (diagonal nondecreasing)

   (17) is weighted L2 isotonic regression on a partial order of the n x n grid. Its optimum is reached by
   recursive partitioning (Luss and Rosset 2014; Spouge, Wan and Wilbur 2003; the split is Hochbaum and
   Queyranne's 2003 minimum cut): a region R (convex in the order) has the weighted mean m of t over its
   cells; the upper subset U of R (closed under R's edges) that maximizes sum_U w (t - m) is found; if that
   sum is not positive, x = m on all of R is optimal there (the KKT conditions hold); else R splits into U and
   R \ U, both convex, and each is solved on its own: (17)'s optimum is the union of their optima.

   A convex region meets each row in one run of columns [lo_h, hi_h): upper sets of the order take a suffix
   of every row, lower sets a prefix. An upper subset of R therefore takes a suffix [c_h, hi_h) of each row,
   and its best one is a dynamic programme over the rows (`best_upper_subset`): the column edges ask
   c_h <= max(c_{h+1}, lo_h) wherever rows h and h+1 of R overlap past c_{h+1}, and the diagonal edge
   (h, h) -> (h+1, h+1) asks c_{h+1} <= h + 1 wherever (h, h) is taken and (h+1, h+1) is in R. Each region
   costs O(its cells + its rows); the regions form a tree whose leaves are the optimum's blocks.

   A part of a split may have empty rows between its first and last (the staircases of single rows that a
   merged problem's split runs make, where a split's cuts leave a row of the part nothing); rows on both sides
   of one share no edge, so the part is several independent regions, each solved on its own
   (`push_components`). Solved as one, such a part cost O(its rows) at every split below it: on the merged
   problems of a DBW run at n = 4,096, the empty rows of the regions solved summed to 4.5 times the merged
   problem's cells (its cells to 14 times), and splitting them off cut the time of a solve by about 40%.
   Every leaf is the same set of cells either way (a level set of the optimum, where no two components have
   one value: the splits are minimum cuts at a threshold, Hochbaum and Queyranne 2003), summed in the same
   order, so the answer is the same bit for bit (checked on 132 merged problems of DBW runs at n = 2,048 and
   4,096).

   Runs of equal rows may be merged into one row beforehand (`_eq17_exact`): the problem is then m rows of n
   columns, and the diagonal's edge from row j to row j + 1 goes from column dto[j] - 1 to column dto[j].

   A merged problem's optimum is tested as an answer of (17) itself by `check_merged`: the KKT conditions of
   isotonic regression (every level set at its mean, and no upper subset of it gaining), tested with the same
   dynamic programme on the unmerged rows of the level sets that can fail, and naming the rows at which the
   merged runs must split where one does.

   The module exports solve(m, n, weights, targets, diagonal, out, tol), solve_table(...) (the same on rows
   given as rows of a table of distinct rows, with their weights scaled: a merged problem without copies of
   its data) and check(...), on C-contiguous buffers (any object with the buffer protocol, numpy arrays
   among them), so it needs no numpy headers. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int r0, r1;     /* rows r0..r1 (inclusive) */
    size_t off;     /* lo/hi of row r0 + j at pool[off + 2 j], pool[off + 2 j + 1] */
} Region;

typedef struct {
    int *data;
    size_t size, cap;
} IntPool;

typedef struct {
    Region *data;
    size_t size, cap;
} RegionStack;

static int pool_reserve(IntPool *p, size_t extra) {
    if (p->size + extra <= p->cap) return 0;
    size_t cap = p->cap ? p->cap : 1024;
    while (cap < p->size + extra) cap *= 2;
    int *data = realloc(p->data, cap * sizeof(int));
    if (!data) return -1;
    p->data = data;
    p->cap = cap;
    return 0;
}

/* Room for one more item of `item` bytes in a stack of `size` items (capacity doubled when full, `first` at
   the start); -1 when memory runs out. */
static int room_for_one(void **data, size_t size, size_t *cap, size_t item, size_t first) {
    if (size < *cap) return 0;
    size_t grown = *cap ? 2 * *cap : first;
    void *more = realloc(*data, grown * item);
    if (!more) return -1;
    *data = more;
    *cap = grown;
    return 0;
}

static int stack_push(RegionStack *s, Region r) {
    if (room_for_one((void **)&s->data, s->size, &s->cap, sizeof(Region), 256)) return -1;
    s->data[s->size++] = r;
    return 0;
}

/* Scratch for the dynamic programme: f (value per choice c of the current row), the previous row's f, its
   prefix maxima, and one back-pointer per (row, choice); and a split's two parts before they are pooled. */
typedef struct {
    double *f, *prev, *pmax, *qmax;
    int *parg, *qarg, *back, *parts;
} Scratch;

/* The dynamic programme's per-row arrays for rows of n columns (back and parts are the caller's); -1 when
   memory runs out (what was allocated is freed by `scratch_free`). */
static int scratch_alloc(Scratch *sc, int n) {
    size_t k = (size_t)n + 1;
    sc->f = malloc(k * sizeof(double));
    sc->prev = malloc(k * sizeof(double));
    sc->pmax = malloc(k * sizeof(double));
    sc->qmax = malloc(k * sizeof(double));
    sc->parg = malloc(k * sizeof(int));
    sc->qarg = malloc(k * sizeof(int));
    return sc->f && sc->prev && sc->pmax && sc->qmax && sc->parg && sc->qarg ? 0 : -1;
}

static void scratch_free(Scratch *sc) {
    free(sc->f); free(sc->prev); free(sc->pmax); free(sc->qmax); free(sc->parg); free(sc->qarg); free(sc->back);
    free(sc->parts);
}

/* A region's rows [lo, hi) split at `cut`: the lower parts [lo, cut) as the first `rows` pairs of `tmp`, the
   upper parts [cut, hi) as the next `rows`. */
static void split_at_cut(const int *lohi, const int *cut, int rows, int *tmp) {
    for (int j = 0; j < rows; j++) {
        tmp[2 * j] = lohi[2 * j];
        tmp[2 * j + 1] = cut[j];
        tmp[2 * rows + 2 * j] = cut[j];
        tmp[2 * rows + 2 * j + 1] = lohi[2 * j + 1];
    }
}

/* A part's `rows` (lo, hi) pairs with their empty end rows trimmed, appended to `pool`: the rows kept are
   [*a, *b], their pairs at *off; -1 when memory runs out. */
static int pool_trimmed(IntPool *pool, const int *p, int rows, int *a, int *b, size_t *off) {
    *a = 0;
    *b = rows - 1;
    while (*a <= *b && p[2 * *a] == p[2 * *a + 1]) (*a)++;
    while (*b >= *a && p[2 * *b] == p[2 * *b + 1]) (*b)--;
    size_t len = 2 * (size_t)(*b - *a + 1);
    if (pool_reserve(pool, len)) return -1;
    memcpy(pool->data + pool->size, p + 2 * *a, len * sizeof(int));
    *off = pool->size;
    pool->size += len;
    return 0;
}

/* A part's `rows` (lo, hi) pairs (its first row r0) as regions: each maximal run of its non-empty rows is one,
   its pairs appended to `pool` and the region pushed. Rows on both sides of an empty row share no edge of the
   part (a column edge joins one column of adjacent rows, a diagonal edge two cells of adjacent rows), and the
   part is convex, so no path of the order joins them either: each run is solved on its own, and the part's
   optimum is theirs side by side. -1 when memory runs out. */
static int push_components(IntPool *pool, RegionStack *stack, const int *p, int rows, int r0) {
    int a = 0;
    while (a < rows) {
        if (p[2 * a] == p[2 * a + 1]) {
            a++;
            continue;
        }
        int b = a;
        while (b + 1 < rows && p[2 * (b + 1)] < p[2 * (b + 1) + 1]) b++;
        size_t len = 2 * (size_t)(b - a + 1);
        if (pool_reserve(pool, len)) return -1;
        memcpy(pool->data + pool->size, p + 2 * a, len * sizeof(int));
        if (stack_push(stack, (Region){r0 + a, r0 + b, pool->size})) return -1;
        pool->size += len;
        a = b + 1;
    }
    return 0;
}

/* The running maximum of v[first..width) and where it is first reached, at max[i] and arg[i]. */
static void running_max(const double *v, int first, int width, double *max, int *arg) {
    double best = v[first];
    int at = first;
    for (int i = first; i < width; i++) {
        int higher = v[i] > best;
        best = higher ? v[i] : best;
        at = higher ? i : at;
        max[i] = best;
        arg[i] = at;
    }
}

/* The upper subset of the region (rows r0..r1, columns lohi) with the largest sum of the gains
   w (t - mean), row h's weights and targets being row src[h] of w and t (row h where src is NULL), its
   weights times scale[h] (1 where scale is NULL): its start
   c_h per row (c_h = hi_h: nothing of row h) written to `cut`, and its sum returned;
   the sum of |gain| over the region is written to `spread`. */
static double best_upper_subset(int n, const double *w, const double *t, const int *src, const double *scale,
                                double mean, const int *dto, const int *lohi, int r0, int r1, Scratch *sc, int *cut,
                                double *spread) {
    int rows = r1 - r0 + 1;
    /* the back-pointers of row j follow those of row j - 1; row j has hi - lo + 1 choices */
    int *back = sc->back;
    double *f = sc->f, *prev = sc->prev, *pmax = sc->pmax, *qmax = sc->qmax;
    int *parg = sc->parg, *qarg = sc->qarg;
    size_t boff = 0;
    /* row r0: f(c) = suffix sum of its gains from c */
    int lo = lohi[0], hi = lohi[1];
    const double *wr = w + (size_t)(src ? src[r0] : r0) * n, *tr = t + (size_t)(src ? src[r0] : r0) * n;
    double s = scale ? scale[r0] : 1.0;
    double acc = 0.0, total = 0.0;
    prev[hi - lo] = 0.0;
    for (int k = hi - 1; k >= lo; k--) {
        double g = (wr[k] * s) * (tr[k] - mean);
        acc += g;
        total += fabs(g);
        prev[k - lo] = acc;
    }
    boff += (size_t)(hi - lo + 1);
    int plo = lo, phi = hi;
    for (int j = 1; j < rows; j++) {
        int h = r0 + j;  /* row h, previous row h - 1 */
        int clo = lohi[2 * j], chi = lohi[2 * j + 1];
        int width = phi - plo + 1;
        /* prefix maxima of prev over choices c in [plo, c] */
        running_max(prev, 0, width, pmax, parg);
        /* the diagonal edge (h-1, d-1) -> (h, d), d = dto[h-1] (d = h unmerged), inside R when both cells
           are: then a choice of row h that leaves (h, d) out (c > d) needs row h-1 to leave (h-1, d-1) out
           (c_{h-1} >= d). */
        int d = dto[h - 1];
        int diag = (plo <= d - 1 && d - 1 < phi && clo <= d && d < chi);
        if (diag) {
            running_max(prev, d - plo, width, qmax, qarg);  /* from the index of choice c = d in prev */
        }
        wr = w + (size_t)(src ? src[h] : h) * n;
        tr = t + (size_t)(src ? src[h] : h) * n;
        s = scale ? scale[h] : 1.0;
        acc = 0.0;
        int *brow = back + boff;
        for (int c = chi; c >= clo; c--) {
            if (c < chi) {
                double g = (wr[c] * s) * (tr[c] - mean);
                acc += g;
                total += fabs(g);
            }
            /* column edges (h, k) -> (h-1, k) for k in [max(c, plo), min(chi, phi)): each needs c_{h-1} <= k,
               the smallest such k bounds it; none where that range is empty */
            int s = c > plo ? c : plo;
            int e = chi < phi ? chi : phi;
            int upper = (s < e) ? s : phi;  /* largest allowed c_{h-1} */
            /* with the diagonal's bound too (c > d), c_{h-1} is in [d, upper]: upper >= d, since c > d gives
               s > d where the column bound holds, and phi > d - 1 where it does not */
            int both = diag && c > d;
            f[c - clo] = acc + (both ? qmax : pmax)[upper - plo];
            brow[c - clo] = (both ? qarg : parg)[upper - plo];
        }
        boff += (size_t)(chi - clo + 1);
        double *swap = prev;
        prev = f;
        f = swap;
        plo = clo;
        phi = chi;
    }
    /* best final choice, then back through the rows */
    int width = phi - plo + 1;
    int arg = 0;
    for (int i = 1; i < width; i++)
        if (prev[i] > prev[arg]) arg = i;
    double value = prev[arg];
    *spread = total;
    for (int j = rows - 1; j >= 0; j--) {
        int clo = lohi[2 * j], chi = lohi[2 * j + 1];
        boff -= (size_t)(chi - clo + 1);
        cut[j] = clo + arg;
        if (j > 0) arg = back[boff + (size_t)arg];
    }
    return value;
}

/* Exact optimum of (17) on m rows of n columns by recursive partitioning; returns 0, or -1 when memory ran
   out. `blocks` gets the number of blocks of the optimum. Row h's targets are row src[h] of t and its
   weights row src[h] of w times scale[h] (row h, times 1, where src and scale are NULL). */
static int partition_solve(int m, int n, const double *w, const double *t, const int *src, const double *scale,
                           const int *dto, double *x, double tol, long *blocks) {
    size_t cells = (size_t)m * n;
    IntPool pool = {0};
    RegionStack stack = {0};
    Scratch sc = {0};
    int *cut = malloc((size_t)m * sizeof(int));
    int scratch = scratch_alloc(&sc, n);
    sc.back = malloc((cells + (size_t)m) * sizeof(int));
    sc.parts = malloc(4 * (size_t)m * sizeof(int));
    int status = -1;
    *blocks = 0;
    if (!cut || scratch || !sc.back || !sc.parts) goto done;
    if (pool_reserve(&pool, 2 * (size_t)m)) goto done;
    for (int h = 0; h < m; h++) {
        pool.data[2 * h] = 0;
        pool.data[2 * h + 1] = n;
    }
    pool.size = 2 * (size_t)m;
    if (stack_push(&stack, (Region){0, m - 1, 0})) goto done;
    while (stack.size) {
        Region reg = stack.data[--stack.size];
        int rows = reg.r1 - reg.r0 + 1;
        const int *lohi = pool.data + reg.off;
        /* weighted mean of t over the region, and the scale of its gains */
        double sw = 0.0, swt = 0.0;
        for (int j = 0; j < rows; j++) {
            int h = reg.r0 + j;
            const double *wr = w + (size_t)(src ? src[h] : h) * n, *tr = t + (size_t)(src ? src[h] : h) * n;
            double s = scale ? scale[h] : 1.0;
            for (int k = lohi[2 * j]; k < lohi[2 * j + 1]; k++) {
                double wk = wr[k] * s;
                sw += wk;
                swt += wk * tr[k];
            }
        }
        double mean = swt / sw;
        double spread;
        double value = best_upper_subset(n, w, t, src, scale, mean, dto, lohi, reg.r0, reg.r1, &sc, cut, &spread);
        /* an upper subset that is all or none of the region can only come from rounding */
        size_t upper_cells = 0, lower_cells = 0;
        for (int j = 0; j < rows; j++) {
            upper_cells += (size_t)(lohi[2 * j + 1] - cut[j]);
            lower_cells += (size_t)(cut[j] - lohi[2 * j]);
        }
        if (!(value > tol * spread) || upper_cells == 0 || lower_cells == 0) {
            /* no upper subset gains: the region is one block at its mean */
            for (int j = 0; j < rows; j++) {
                double *xr = x + (size_t)(reg.r0 + j) * n;
                for (int k = lohi[2 * j]; k < lohi[2 * j + 1]; k++) xr[k] = mean;
            }
            (*blocks)++;
            pool.size = reg.off;  /* the region was the pool's top */
            continue;
        }
        /* split: the lower part [lo, c) and the upper part [c, hi) of each row, empty end rows trimmed;
           both are written over the region's own place at the pool's top */
        int *tmp = sc.parts;
        split_at_cut(lohi, cut, rows, tmp);
        pool.size = reg.off;
        for (int part = 0; part < 2; part++)
            if (push_components(&pool, &stack, tmp + 2 * (size_t)rows * part, rows, reg.r0)) goto done;
    }
    status = 0;
done:
    free(cut);
    scratch_free(&sc);
    free(pool.data);
    free(stack.data);
    return status;
}

/* A part of a level set being split (`check_merged`): rows r0..r1, its columns in a pool from off, `depth`
   splits below the level set (0: the level set, whose mean and best upper subset are known). */
typedef struct {
    int r0, r1, depth;
    size_t off;
} Part;

typedef struct {
    Part *data;
    size_t size, cap;
} PartStack;

static int part_push(PartStack *s, Part p) {
    if (room_for_one((void **)&s->data, s->size, &s->cap, sizeof(Part), 64)) return -1;
    s->data[s->size++] = p;
    return 0;
}

/* First index in row[lo, hi) whose value is >= v (is_upper 0) or > v (is_upper 1): rows are nondecreasing. */
static int bound_in_row(const double *row, int n, double v, int is_upper) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (is_upper ? row[mid] <= v : row[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The KKT test of the unmerged problem (17) at a merged problem's optimum x (m rows of n columns; merged row j
   holds rows starts[j] to starts[j + 1] - 1, each with the weights and targets of row src[j] of w and t,
   the merged row's weights being scale[j] times those).
   x is (17)'s optimum iff every level set (the cells of one value, convex in the order, one run of columns
   per row) is at its weighted mean and has no upper subset (closed under the level set's own edges) whose
   w (t - mean) sums above 0. A level set with no diagonal edge inside it that touches a merged run of two
   rows or more passes: there the rows of a run are equal and nothing among them asks for different cuts,
   so its best upper subset takes one cut on each run (given the cuts of the rows around it, a run's rows
   can all take the best of their cuts), a subset of the merged problem, where none gains at its optimum.
   The others are tested on their unmerged rows by `best_upper_subset`; where one fails, it is split on
   recursively as `partition_solve` would split it on its own, and the rows of a merged run at which a cut
   moves are marked in `split` (n bytes).
   Returns 1 where x passes, 0 where rows were marked, 2 where a level set failed without naming a row,
   -1 where memory ran out. */
static int check_merged(int m, int n, const double *w, const double *t, const int *src, const double *scale,
                        const int *starts, const double *x, double tol, double mean_tol, unsigned char *split) {
    int *row_of = malloc((size_t)n * sizeof(int));      /* merged row of each row */
    int *full_src = malloc((size_t)n * sizeof(int));    /* table row of each row */
    int *dto = malloc((size_t)n * sizeof(int));         /* the diagonal edge into row h + 1 ends at column h + 1 */
    double *need = malloc((size_t)(n + 1) * sizeof(double));
    int *lohi = malloc(2 * (size_t)n * sizeof(int)), *cut = malloc((size_t)n * sizeof(int));
    int *mlo = malloc((size_t)m * sizeof(int)), *mhi = malloc((size_t)m * sizeof(int));
    Scratch sc = {0};
    size_t back_cap = 0;
    int status = -1;
    IntPool pool = {0};
    PartStack stack = {0};
    int *parts = malloc(4 * (size_t)n * sizeof(int));
    int scratch = scratch_alloc(&sc, n);
    if (!row_of || !full_src || !dto || !need || !lohi || !cut || !mlo || !mhi || scratch || !parts) goto done;
    for (int j = 0; j < m; j++) {
        int end = j + 1 < m ? starts[j + 1] : n;
        for (int h = starts[j]; h < end; h++) {
            row_of[h] = j;
            full_src[h] = src[j];
        }
    }
    for (int h = 0; h < n; h++) dto[h] = h + 1;
    /* the values of the diagonal edges (h, h) -> (h + 1, h + 1) inside a level set, one end in a merged run */
    int needed = 0;
    for (int h = 0; h + 1 < n; h++) {
        int a = row_of[h], b = row_of[h + 1];
        int in_run = (a + 1 < m ? starts[a + 1] : n) - starts[a] > 1 || (b + 1 < m ? starts[b + 1] : n) - starts[b] > 1;
        if (!in_run) continue;
        double v = x[(size_t)a * n + h];
        if (v == x[(size_t)b * n + h + 1]) need[needed++] = v;
    }
    qsort(need, (size_t)needed, sizeof(double), compare_doubles);
    status = 1;
    memset(split, 0, (size_t)n);
    for (int i = 0; i < needed; i++) {
        if (i > 0 && need[i] == need[i - 1]) continue;
        double v = need[i];
        /* the level set's columns in each merged row, its mean from the merged rows (weights summed) */
        int j0 = -1, j1 = -1;
        double sw = 0.0, swt = 0.0;
        for (int j = 0; j < m; j++) {
            const double *xr = x + (size_t)j * n;
            mlo[j] = bound_in_row(xr, n, v, 0);
            mhi[j] = bound_in_row(xr, n, v, 1);
            if (mlo[j] < mhi[j]) {
                if (j0 < 0) j0 = j;
                j1 = j;
                const double *wr = w + (size_t)src[j] * n, *tr = t + (size_t)src[j] * n;
                for (int k = mlo[j]; k < mhi[j]; k++) {
                    double wk = wr[k] * scale[j];
                    sw += wk;
                    swt += wk * tr[k];
                }
            }
        }
        double mean = swt / sw;
        if (!(fabs(mean - v) <= mean_tol)) {
            status = 2;
            break;
        }
        int r0 = starts[j0], r1 = (j1 + 1 < m ? starts[j1 + 1] : n) - 1;
        size_t choices = 0;
        int at = mlo[j0];
        for (int h = r0; h <= r1; h++) {
            int j = row_of[h];
            if (mlo[j] < mhi[j]) {
                lohi[2 * (h - r0)] = mlo[j];
                lohi[2 * (h - r0) + 1] = mhi[j];
                at = mhi[j];
            } else {
                lohi[2 * (h - r0)] = lohi[2 * (h - r0) + 1] = at;
            }
            choices += (size_t)(lohi[2 * (h - r0) + 1] - lohi[2 * (h - r0)] + 1);
        }
        if (choices > back_cap) {
            free(sc.back);
            back_cap = choices;
            sc.back = malloc(back_cap * sizeof(int));
            if (!sc.back) {
                status = -1;
                goto done;
            }
        }
        double spread;
        double value = best_upper_subset(n, w, t, full_src, NULL, mean, dto, lohi, r0, r1, &sc, cut, &spread);
        size_t upper_cells = 0, lower_cells = 0;
        for (int j = 0; j <= r1 - r0; j++) {
            upper_cells += (size_t)(lohi[2 * j + 1] - cut[j]);
            lower_cells += (size_t)(cut[j] - lohi[2 * j]);
        }
        if (value > tol * spread && upper_cells > 0 && lower_cells > 0) {
            if (status == 1) status = 2;
            /* the level set is split on as the partition would split it alone, and every cut that moves
               inside a merged run names its row: most rows the next merged problem needs are then named at
               once, not one re-solve at a time */
            stack.size = 0;
            pool.size = 0;
            Part part = {r0, r1, 0, 0};
            int rows = r1 - r0 + 1;
            if (pool_reserve(&pool, 2 * (size_t)rows) || part_push(&stack, part)) {
                status = -1;
                goto done;
            }
            memcpy(pool.data, lohi, 2 * (size_t)rows * sizeof(int));
            pool.size = 2 * (size_t)rows;
            while (stack.size) {
                part = stack.data[--stack.size];
                int pr = part.r1 - part.r0 + 1;
                const int *plohi = pool.data + part.off;
                if (part.depth > 0) {  /* a part's own mean and best upper subset (the level set's are known) */
                    double pw = 0.0, pwt = 0.0;
                    for (int j = 0; j < pr; j++) {
                        const double *wr = w + (size_t)full_src[part.r0 + j] * n;
                        const double *tr = t + (size_t)full_src[part.r0 + j] * n;
                        for (int k = plohi[2 * j]; k < plohi[2 * j + 1]; k++) {
                            pw += wr[k];
                            pwt += wr[k] * tr[k];
                        }
                    }
                    value = best_upper_subset(n, w, t, full_src, NULL, pwt / pw, dto, plohi, part.r0, part.r1, &sc, cut,
                                              &spread);
                    upper_cells = lower_cells = 0;
                    for (int j = 0; j < pr; j++) {
                        upper_cells += (size_t)(plohi[2 * j + 1] - cut[j]);
                        lower_cells += (size_t)(cut[j] - plohi[2 * j]);
                    }
                    if (!(value > tol * spread) || upper_cells == 0 || lower_cells == 0) {
                        pool.size = part.off;
                        continue;
                    }
                }
                for (int h = part.r0 + 1; h <= part.r1; h++) {
                    if (row_of[h] == row_of[h - 1] && cut[h - part.r0] != cut[h - 1 - part.r0]) {
                        split[h] = 1;
                        status = 0;
                    }
                }
                int *tmp = parts;
                split_at_cut(plohi, cut, pr, tmp);
                pool.size = part.off;
                for (int side = 0; side < 2; side++) {
                    int a, b;
                    size_t off;
                    if (pool_trimmed(&pool, tmp + 2 * (size_t)pr * side, pr, &a, &b, &off)
                        || part_push(&stack, (Part){part.r0 + a, part.r0 + b, part.depth + 1, off})) {
                        status = -1;
                        goto done;
                    }
                }
            }
        }
    }
done:
    free(pool.data); free(stack.data); free(parts);
    free(row_of); free(full_src); free(dto); free(need); free(lohi); free(cut); free(mlo); free(mhi);
    scratch_free(&sc);
    return status;
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t count, const char *format, Py_ssize_t itemsize,
                      int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) return -1;
    if (strcmp(view->format, format) != 0 || view->itemsize != itemsize || view->len / itemsize != count ||
        view->len % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous buffer of %zd values of format '%s', but got %zd "
                     "bytes of format '%s'", name, count, format, view->len, view->format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *solve(PyObject *self, PyObject *args) {
    (void)self;
    int m, n;
    PyObject *wo, *to, *do_, *xo;
    double tol;
    if (!PyArg_ParseTuple(args, "iiOOOOd", &m, &n, &wo, &to, &do_, &xo, &tol)) return NULL;
    if (m < 1 || n < 1) {
        PyErr_Format(PyExc_ValueError, "m and n must be >= 1, but got m=%d, n=%d", m, n);
        return NULL;
    }
    Py_ssize_t cells = (Py_ssize_t)m * n;
    Py_buffer views[4];
    PyObject *objs[4] = {wo, to, do_, xo};
    const char *names[4] = {"weights", "targets", "diagonal", "out"};
    Py_ssize_t counts[4] = {cells, cells, m - 1, cells};
    int got = 0;
    for (; got < 4; got++) {
        int ints = got == 2;
        if (get_buffer(objs[got], &views[got], counts[got], ints ? "i" : "d", ints ? sizeof(int) : sizeof(double),
                       got == 3, names[got]))
            break;
    }
    if (got < 4) {
        for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
        return NULL;
    }
    const int *dto = views[2].buf;
    for (int j = 0; j + 1 < m; j++) {
        if (dto[j] < 1 || dto[j] >= n) {
            for (int i = 0; i < 4; i++) PyBuffer_Release(&views[i]);
            PyErr_Format(PyExc_ValueError, "diagonal[%d] must be in [1, n), but got %d", j, dto[j]);
            return NULL;
        }
    }
    const double *weights = views[0].buf, *targets = views[1].buf;
    for (Py_ssize_t i = 0; i < cells; i++) {
        if (!(weights[i] > 0.0) || !isfinite(weights[i]) || !isfinite(targets[i])) {
            PyObject *w = PyFloat_FromDouble(weights[i]), *t = PyFloat_FromDouble(targets[i]);
            for (int j = 0; j < 4; j++) PyBuffer_Release(&views[j]);
            if (w && t)
                PyErr_Format(PyExc_ValueError, "weights must be finite and > 0 and targets finite, but got weight %R "
                             "and target %R at index %zd", w, t, i);
            Py_XDECREF(w);
            Py_XDECREF(t);
            return NULL;
        }
    }
    long blocks = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = partition_solve(m, n, views[0].buf, views[1].buf, NULL, NULL, dto, views[3].buf, tol, &blocks);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 4; i++) PyBuffer_Release(&views[i]);
    if (status) return PyErr_NoMemory();
    return PyLong_FromLong(blocks);
}

/* The buffers of a call on a table of r distinct rows: weights and targets (r x n), source (m int32 in [0, r)),
   scale (m positive finite float64), then `extra` more (counts, formats, item sizes, the last writable). */
static int table_buffers(int m, int n, int r, PyObject **objs, Py_buffer *views, int extra, const Py_ssize_t *counts,
                         const char *const *formats, const Py_ssize_t *sizes, const char *const *names) {
    const char *base_names[4] = {"weights", "targets", "source", "scale"};
    const char *base_formats[4] = {"d", "d", "i", "d"};
    Py_ssize_t base_sizes[4] = {sizeof(double), sizeof(double), sizeof(int), sizeof(double)};
    Py_ssize_t base_counts[4] = {(Py_ssize_t)r * n, (Py_ssize_t)r * n, m, m};
    int total = 4 + extra, got = 0;
    for (; got < total; got++) {
        int b = got < 4;
        if (get_buffer(objs[got], &views[got], b ? base_counts[got] : counts[got - 4],
                       b ? base_formats[got] : formats[got - 4], b ? base_sizes[got] : sizes[got - 4],
                       got == total - 1, b ? base_names[got] : names[got - 4]))
            break;
    }
    if (got < total) {
        for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
        return -1;
    }
    const double *w = views[0].buf, *t = views[1].buf, *scale = views[3].buf;
    const int *src = views[2].buf;
    const char *bad = NULL;
    unsigned char *seen = calloc((size_t)r, 1);  /* the table's rows in use, each checked once */
    if (!seen) {
        for (int i = 0; i < total; i++) PyBuffer_Release(&views[i]);
        PyErr_NoMemory();
        return -1;
    }
    for (int j = 0; j < m && !bad; j++) {
        if (src[j] < 0 || src[j] >= r) {
            bad = "source must index rows of the table";
        } else if (!(scale[j] > 0.0) || !isfinite(scale[j])) {
            bad = "scale must be finite and > 0";
        } else if (!seen[src[j]]) {
            seen[src[j]] = 1;
            const double *wr = w + (size_t)src[j] * n, *tr = t + (size_t)src[j] * n;
            for (int k = 0; k < n && !bad; k++)
                if (!(wr[k] > 0.0) || !isfinite(wr[k]) || !isfinite(tr[k]))
                    bad = "weights must be finite and > 0 and targets finite";
        }
    }
    free(seen);
    if (bad) {
        for (int i = 0; i < total; i++) PyBuffer_Release(&views[i]);
        PyErr_SetString(PyExc_ValueError, bad);
        return -1;
    }
    return 0;
}

static PyObject *solve_table(PyObject *self, PyObject *args) {
    (void)self;
    int m, n, r;
    PyObject *objs[6];
    double tol;
    if (!PyArg_ParseTuple(args, "iiiOOOOOOd", &m, &n, &r, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &tol))
        return NULL;
    if (m < 1 || n < 1 || r < 1) {
        PyErr_Format(PyExc_ValueError, "m, n and r must be >= 1, but got m=%d, n=%d, r=%d", m, n, r);
        return NULL;
    }
    Py_buffer views[6];
    Py_ssize_t counts[2] = {m - 1, (Py_ssize_t)m * n}, sizes[2] = {sizeof(int), sizeof(double)};
    const char *formats[2] = {"i", "d"}, *names[2] = {"diagonal", "out"};
    if (table_buffers(m, n, r, objs, views, 2, counts, formats, sizes, names)) return NULL;
    const int *dto = views[4].buf;
    for (int j = 0; j + 1 < m; j++) {
        if (dto[j] < 1 || dto[j] >= n) {
            for (int i = 0; i < 6; i++) PyBuffer_Release(&views[i]);
            PyErr_Format(PyExc_ValueError, "diagonal[%d] must be in [1, n), but got %d", j, dto[j]);
            return NULL;
        }
    }
    long blocks = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = partition_solve(m, n, views[0].buf, views[1].buf, views[2].buf, views[3].buf, dto, views[5].buf, tol,
                             &blocks);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 6; i++) PyBuffer_Release(&views[i]);
    if (status) return PyErr_NoMemory();
    return PyLong_FromLong(blocks);
}

static PyObject *check(PyObject *self, PyObject *args) {
    (void)self;
    int m, n, r;
    PyObject *objs[7];
    double tol, mean_tol;
    if (!PyArg_ParseTuple(args, "iiiOOOOOOddO", &m, &n, &r, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &tol, &mean_tol, &objs[6]))
        return NULL;
    if (m < 1 || n < 1 || r < 1 || m > n) {
        PyErr_Format(PyExc_ValueError, "need 1 <= m <= n and r >= 1, but got m=%d, n=%d, r=%d", m, n, r);
        return NULL;
    }
    Py_buffer views[7];
    Py_ssize_t counts[3] = {m, (Py_ssize_t)m * n, n}, sizes[3] = {sizeof(int), sizeof(double), 1};
    const char *formats[3] = {"i", "d", "B"}, *names[3] = {"starts", "x", "split"};
    if (table_buffers(m, n, r, objs, views, 3, counts, formats, sizes, names)) return NULL;
    const int *starts = views[4].buf;
    int bad = starts[0] != 0;
    for (int j = 1; j < m && !bad; j++) bad = starts[j] <= starts[j - 1] || starts[j] >= n;
    if (bad) {
        for (int i = 0; i < 7; i++) PyBuffer_Release(&views[i]);
        PyErr_SetString(PyExc_ValueError, "starts must rise from 0 below n");
        return NULL;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = check_merged(m, n, views[0].buf, views[1].buf, views[2].buf, views[3].buf, starts, views[5].buf, tol,
                          mean_tol, views[6].buf);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 7; i++) PyBuffer_Release(&views[i]);
    if (status < 0) return PyErr_NoMemory();
    return PyLong_FromLong(status);
}

static PyMethodDef methods[] = {
    {"solve", solve, METH_VARARGS,
     "solve(m, n, weights, targets, diagonal, out, tol) -> blocks: (17)'s exact optimum on m rows of n columns "
     "written to out (float64, C order; weights and targets likewise); the diagonal edge from row j goes from "
     "column diagonal[j] - 1 to column diagonal[j] of row j + 1 (int32, m - 1 values; j + 1 for (17) itself); a "
     "region splits where an upper subset gains more than tol times the sum of |w (t - mean)| over it."},
    {"solve_table", solve_table, METH_VARARGS,
     "solve_table(m, n, r, weights, targets, source, scale, diagonal, out, tol) -> blocks: solve() on m rows whose "
     "data are rows of a table: row j's targets are row source[j] of the r x n targets and its weights row source[j] "
     "of the weights times scale[j] (int32 source, float64 scale)."},
    {"check", check, METH_VARARGS,
     "check(m, n, r, weights, targets, source, scale, starts, x, tol, mean_tol, split) -> status: the KKT test of "
     "(17) at the optimum x (m x n) of a merged problem whose data are given as in solve_table (merged row j holds "
     "rows starts[j] to starts[j + 1] - 1, each with row source[j] of the table, scale[j] their number), on the "
     "unmerged rows of the level sets that need it: 1 where x is (17)'s optimum, 0 where split (n bytes) marks the "
     "rows at which a merged run must split, 2 where a level set fails without naming one."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_eq17_partition", NULL, -1, methods, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__eq17_partition(void) { return PyModule_Create(&module); }
