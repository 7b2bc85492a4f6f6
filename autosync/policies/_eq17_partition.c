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
   costs O(its cells + its rows); the regions form a binary tree whose leaves are the optimum's blocks.

   Runs of equal rows may be merged into one row beforehand (`_eq17_exact`): the problem is then m rows of n
   columns, and the diagonal's edge from row j to row j + 1 goes from column dto[j] - 1 to column dto[j].

   The module exports one function, solve(m, n, weights, targets, diagonal, out, tol), on C-contiguous
   buffers (any object with the buffer protocol, numpy arrays among them), so it needs no numpy headers. */

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

static int stack_push(RegionStack *s, Region r) {
    if (s->size == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        Region *data = realloc(s->data, cap * sizeof(Region));
        if (!data) return -1;
        s->data = data;
        s->cap = cap;
    }
    s->data[s->size++] = r;
    return 0;
}

/* Scratch for the dynamic programme: f (value per choice c of the current row), the previous row's f, its
   prefix maxima, and one back-pointer per (row, choice); and a split's two parts before they are pooled. */
typedef struct {
    double *f, *prev, *pmax, *qmax;
    int *parg, *qarg, *back, *parts;
} Scratch;

/* The upper subset of the region (rows r0..r1, columns lohi) with the largest sum of the gains
   w (t - mean): its start c_h per row (c_h = hi_h: nothing of row h) written to `cut`, and its sum returned;
   the sum of |gain| over the region is written to `spread`. */
static double best_upper_subset(int n, const double *w, const double *t, double mean, const int *dto,
                                const int *lohi, int r0, int r1, Scratch *sc, int *cut, double *spread) {
    int rows = r1 - r0 + 1;
    /* the back-pointers of row j follow those of row j - 1; row j has hi - lo + 1 choices */
    int *back = sc->back;
    double *f = sc->f, *prev = sc->prev, *pmax = sc->pmax, *qmax = sc->qmax;
    int *parg = sc->parg, *qarg = sc->qarg;
    size_t boff = 0;
    /* row r0: f(c) = suffix sum of its gains from c */
    int lo = lohi[0], hi = lohi[1];
    const double *wr = w + (size_t)r0 * n, *tr = t + (size_t)r0 * n;
    double acc = 0.0, total = 0.0;
    prev[hi - lo] = 0.0;
    for (int k = hi - 1; k >= lo; k--) {
        double g = wr[k] * (tr[k] - mean);
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
        for (int i = 0; i < width; i++) {
            if (i == 0 || prev[i] > pmax[i - 1]) {
                pmax[i] = prev[i];
                parg[i] = i;
            } else {
                pmax[i] = pmax[i - 1];
                parg[i] = parg[i - 1];
            }
        }
        /* the diagonal edge (h-1, d-1) -> (h, d), d = dto[h-1] (d = h unmerged), inside R when both cells
           are: then a choice of row h that leaves (h, d) out (c > d) needs row h-1 to leave (h-1, d-1) out
           (c_{h-1} >= d). */
        int d = dto[h - 1];
        int diag = (plo <= d - 1 && d - 1 < phi && clo <= d && d < chi);
        if (diag) {
            int first = d - plo;  /* index of choice c = d in prev */
            for (int i = first; i < width; i++) {
                if (i == first || prev[i] > qmax[i - 1]) {
                    qmax[i] = prev[i];
                    qarg[i] = i;
                } else {
                    qmax[i] = qmax[i - 1];
                    qarg[i] = qarg[i - 1];
                }
            }
        }
        wr = w + (size_t)h * n;
        tr = t + (size_t)h * n;
        acc = 0.0;
        int *brow = back + boff;
        for (int c = chi; c >= clo; c--) {
            if (c < chi) {
                double g = wr[c] * (tr[c] - mean);
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
   out. `blocks` gets the number of blocks of the optimum. */
static int partition_solve(int m, int n, const double *w, const double *t, const int *dto, double *x, double tol,
                           long *blocks) {
    size_t cells = (size_t)m * n;
    IntPool pool = {0};
    RegionStack stack = {0};
    Scratch sc = {0};
    int *cut = malloc((size_t)m * sizeof(int));
    sc.f = malloc((size_t)(n + 1) * sizeof(double));
    sc.prev = malloc((size_t)(n + 1) * sizeof(double));
    sc.pmax = malloc((size_t)(n + 1) * sizeof(double));
    sc.qmax = malloc((size_t)(n + 1) * sizeof(double));
    sc.parg = malloc((size_t)(n + 1) * sizeof(int));
    sc.qarg = malloc((size_t)(n + 1) * sizeof(int));
    sc.back = malloc((cells + (size_t)m) * sizeof(int));
    sc.parts = malloc(4 * (size_t)m * sizeof(int));
    int status = -1;
    *blocks = 0;
    if (!cut || !sc.f || !sc.prev || !sc.pmax || !sc.qmax || !sc.parg || !sc.qarg || !sc.back || !sc.parts) goto done;
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
            const double *wr = w + (size_t)(reg.r0 + j) * n, *tr = t + (size_t)(reg.r0 + j) * n;
            for (int k = lohi[2 * j]; k < lohi[2 * j + 1]; k++) {
                sw += wr[k];
                swt += wr[k] * tr[k];
            }
        }
        double mean = swt / sw;
        double spread;
        double value = best_upper_subset(n, w, t, mean, dto, lohi, reg.r0, reg.r1, &sc, cut, &spread);
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
        for (int j = 0; j < rows; j++) {
            tmp[2 * j] = lohi[2 * j];
            tmp[2 * j + 1] = cut[j];
            tmp[2 * rows + 2 * j] = cut[j];
            tmp[2 * rows + 2 * j + 1] = lohi[2 * j + 1];
        }
        pool.size = reg.off;
        for (int part = 0; part < 2; part++) {
            const int *p = tmp + 2 * (size_t)rows * part;
            int a = 0, b = rows - 1;
            while (a <= b && p[2 * a] == p[2 * a + 1]) a++;
            while (b >= a && p[2 * b] == p[2 * b + 1]) b--;
            size_t len = 2 * (size_t)(b - a + 1);
            if (pool_reserve(&pool, len)) goto done;
            memcpy(pool.data + pool.size, p + 2 * a, len * sizeof(int));
            if (stack_push(&stack, (Region){reg.r0 + a, reg.r0 + b, pool.size})) goto done;
            pool.size += len;
        }
    }
    status = 0;
done:
    free(cut);
    free(sc.f);
    free(sc.prev);
    free(sc.pmax);
    free(sc.qmax);
    free(sc.parg);
    free(sc.qarg);
    free(sc.back);
    free(sc.parts);
    free(pool.data);
    free(stack.data);
    return status;
}

/* Is x (n x n, feasible for (17)) its optimum? The KKT conditions of isotonic regression on a partial
   order, level set by level set: every level set L = {x = c} has its weighted mean of t at c, and no
   upper subset of L (closed under L's own edges: a path of the order between two cells of L stays in L)
   gains, as in `partition_solve`'s split test. A level set meets each row in one run of columns (rows are
   nondecreasing), so `best_upper_subset` finds its best upper subset, rows it skips left empty. Costs
   O(n^2 + n levels). Returns 1 (optimal), 0 (not), -1 (out of memory). */
static int check_optimal(int n, const double *w, const double *t, const double *x, double tol, double mean_tol,
                         unsigned char *split, const unsigned char *merged) {
    size_t cells = (size_t)n * n;
    /* the runs of equal values of each row, and their level (distinct value) by an open-addressing table */
    size_t cap = 1024;
    size_t nruns = 0, runs_cap = 4 * (size_t)n;
    int *run_row = malloc(runs_cap * sizeof(int)), *run_lo = malloc(runs_cap * sizeof(int)),
        *run_hi = malloc(runs_cap * sizeof(int)), *run_level = malloc(runs_cap * sizeof(int));
    size_t table_size = 1;
    while (table_size < 2 * cap) table_size *= 2;
    long *table = NULL;
    double *level_value = NULL;
    int *level_count = NULL, *level_start = NULL, *order = NULL, *lohi = NULL, *cut = NULL;
    Scratch sc = {0};
    int *dto = malloc((size_t)(n + 1) * sizeof(int));
    size_t nlevels = 0, level_cap = cap;
    level_value = malloc(level_cap * sizeof(double));
    table = malloc(table_size * sizeof(long));
    int status = -1;
    if (!run_row || !run_lo || !run_hi || !run_level || !level_value || !table || !dto) goto done;
    for (size_t i = 0; i < table_size; i++) table[i] = -1;
    for (int j = 0; j < n; j++) dto[j] = j + 1;
    for (int h = 0; h < n; h++) {
        const double *xr = x + (size_t)h * n;
        int lo = 0;
        while (lo < n) {
            int hi = lo + 1;
            while (hi < n && xr[hi] == xr[lo]) hi++;
            double v = xr[lo];
            if (v == 0.0) v = 0.0;  /* -0.0 and 0.0 are one level */
            unsigned long long bits;
            memcpy(&bits, &v, sizeof bits);
            size_t slot = (size_t)((bits * 0x9E3779B97F4A7C15ULL) >> 20) & (table_size - 1);
            while (table[slot] >= 0 && level_value[table[slot]] != v) slot = (slot + 1) & (table_size - 1);
            if (table[slot] < 0) {
                if (nlevels == level_cap) {
                    level_cap *= 2;
                    double *lv = realloc(level_value, level_cap * sizeof(double));
                    if (!lv) goto done;
                    level_value = lv;
                }
                level_value[nlevels] = v;
                table[slot] = (long)nlevels++;
                if (2 * nlevels > table_size) {  /* grow and rehash */
                    size_t size2 = table_size * 4;
                    long *t2 = malloc(size2 * sizeof(long));
                    if (!t2) goto done;
                    for (size_t i = 0; i < size2; i++) t2[i] = -1;
                    for (size_t l = 0; l < nlevels; l++) {
                        unsigned long long b2;
                        memcpy(&b2, &level_value[l], sizeof b2);
                        size_t s2 = (size_t)((b2 * 0x9E3779B97F4A7C15ULL) >> 20) & (size2 - 1);
                        while (t2[s2] >= 0) s2 = (s2 + 1) & (size2 - 1);
                        t2[s2] = (long)l;
                    }
                    free(table);
                    table = t2;
                    table_size = size2;
                    slot = (size_t)-1;
                }
            }
            long level = -1;
            if (slot == (size_t)-1) {
                size_t s3 = (size_t)((bits * 0x9E3779B97F4A7C15ULL) >> 20) & (table_size - 1);
                while (level_value[table[s3]] != v) s3 = (s3 + 1) & (table_size - 1);
                level = table[s3];
            } else {
                level = table[slot];
            }
            if (nruns == runs_cap) {
                runs_cap *= 2;
                int *a = realloc(run_row, runs_cap * sizeof(int)); if (!a) goto done; run_row = a;
                a = realloc(run_lo, runs_cap * sizeof(int)); if (!a) goto done; run_lo = a;
                a = realloc(run_hi, runs_cap * sizeof(int)); if (!a) goto done; run_hi = a;
                a = realloc(run_level, runs_cap * sizeof(int)); if (!a) goto done; run_level = a;
            }
            run_row[nruns] = h;
            run_lo[nruns] = lo;
            run_hi[nruns] = hi;
            run_level[nruns] = (int)level;
            nruns++;
            lo = hi;
        }
    }
    /* the runs of each level, in row order (a counting sort keeps the rows' order) */
    level_count = calloc(nlevels + 1, sizeof(int));
    level_start = malloc((nlevels + 1) * sizeof(int));
    order = malloc((nruns + 1) * sizeof(int));
    lohi = malloc(2 * (size_t)n * sizeof(int));
    cut = malloc((size_t)n * sizeof(int));
    sc.f = malloc((size_t)(n + 1) * sizeof(double));
    sc.prev = malloc((size_t)(n + 1) * sizeof(double));
    sc.pmax = malloc((size_t)(n + 1) * sizeof(double));
    sc.qmax = malloc((size_t)(n + 1) * sizeof(double));
    sc.parg = malloc((size_t)(n + 1) * sizeof(int));
    sc.qarg = malloc((size_t)(n + 1) * sizeof(int));
    sc.back = malloc((cells + (size_t)n) * sizeof(int));
    if (!level_count || !level_start || !order || !lohi || !cut || !sc.f || !sc.prev || !sc.pmax || !sc.qmax ||
        !sc.parg || !sc.qarg || !sc.back) goto done;
    for (size_t r = 0; r < nruns; r++) level_count[run_level[r]]++;
    level_start[0] = 0;
    for (size_t l = 0; l < nlevels; l++) level_start[l + 1] = level_start[l] + level_count[l];
    /* only level sets that hold the diagonal cell of a row merged with others need the test: in any other,
       the rows of a merged run are equal and have no diagonal edge among them, so a best upper subset takes
       one cut on all of them (the cuts of a chain of equal rows between two bounds), an answer of the
       merged problem, which is optimal */
    memset(level_count, 0, nlevels * sizeof(int));
    for (int h = 0; h < n; h++) {
        if (!merged[h]) continue;
        const double *xr = x + (size_t)h * n;
        /* the level of (h, h): the run of row h that holds column h */
        double v = xr[h];
        if (v == 0.0) v = 0.0;
        unsigned long long bits;
        memcpy(&bits, &v, sizeof bits);
        size_t s3 = (size_t)((bits * 0x9E3779B97F4A7C15ULL) >> 20) & (table_size - 1);
        while (level_value[table[s3]] != v) s3 = (s3 + 1) & (table_size - 1);
        level_count[table[s3]] = 1;
    }
    unsigned char *need = malloc(nlevels + 1);
    if (!need) { status = -1; goto done; }
    for (size_t l = 0; l < nlevels; l++) need[l] = (unsigned char)level_count[l];
    for (size_t l = 0; l < nlevels; l++) level_count[l] = level_start[l];
    for (size_t r = 0; r < nruns; r++) order[level_count[run_level[r]]++] = (int)r;
    status = 1;
    memset(split, 0, (size_t)n);
    for (size_t l = 0; l < nlevels && status != 2; l++) {
        if (!need[l]) continue;
        int first = order[level_start[l]], last = order[level_start[l + 1] - 1];
        int r0 = run_row[first], r1 = run_row[last];
        /* rows the level skips are empty runs */
        int idx = level_start[l];
        double sw = 0.0, swt = 0.0;
        for (int h = r0; h <= r1; h++) {
            int j = h - r0;
            if (idx < level_start[l + 1] && run_row[order[idx]] == h) {
                int r = order[idx++];
                lohi[2 * j] = run_lo[r];
                lohi[2 * j + 1] = run_hi[r];
                const double *wr = w + (size_t)h * n, *tr = t + (size_t)h * n;
                for (int k = run_lo[r]; k < run_hi[r]; k++) {
                    sw += wr[k];
                    swt += wr[k] * tr[k];
                }
            } else {
                int at = j > 0 ? lohi[2 * j - 1] : 0;
                lohi[2 * j] = lohi[2 * j + 1] = at;
            }
        }
        double mean = swt / sw;
        if (!(fabs(mean - level_value[l]) <= mean_tol)) {
            status = 2;  /* not at its mean: no row to split names the fault */
            break;
        }
        double spread;
        double value = best_upper_subset(n, w, t, mean, dto, lohi, r0, r1, &sc, cut, &spread);
        size_t upper_cells = 0, lower_cells = 0;
        for (int j = 0; j <= r1 - r0; j++) {
            upper_cells += (size_t)(lohi[2 * j + 1] - cut[j]);
            lower_cells += (size_t)(cut[j] - lohi[2 * j]);
        }
        if (value > tol * spread && upper_cells > 0 && lower_cells > 0) {
            status = 0;
            /* the rows where the gaining subset's cut moves: a merged run must split there */
            for (int j = 1; j <= r1 - r0; j++)
                if (cut[j] - lohi[2 * j] != cut[j - 1] - lohi[2 * j - 2] || cut[j] != cut[j - 1]) split[r0 + j] = 1;
        }
    }
    free(need);
done:
    free(run_row); free(run_lo); free(run_hi); free(run_level); free(table); free(level_value);
    free(level_count); free(level_start); free(order); free(lohi); free(cut); free(dto);
    free(sc.f); free(sc.prev); free(sc.pmax); free(sc.qmax); free(sc.parg); free(sc.qarg); free(sc.back);
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
    status = partition_solve(m, n, views[0].buf, views[1].buf, dto, views[3].buf, tol, &blocks);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 4; i++) PyBuffer_Release(&views[i]);
    if (status) return PyErr_NoMemory();
    return PyLong_FromLong(blocks);
}

static PyObject *check(PyObject *self, PyObject *args) {
    (void)self;
    int n;
    PyObject *wo, *to, *xo, *so, *mo;
    double tol, mean_tol;
    if (!PyArg_ParseTuple(args, "iOOOOOdd", &n, &wo, &to, &xo, &so, &mo, &tol, &mean_tol)) return NULL;
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "n must be >= 1, but got n=%d", n);
        return NULL;
    }
    Py_ssize_t cells = (Py_ssize_t)n * n;
    Py_buffer views[5];
    PyObject *objs[5] = {wo, to, xo, so, mo};
    const char *names[5] = {"weights", "targets", "x", "split", "merged"};
    int got = 0;
    for (; got < 5; got++)
        if (get_buffer(objs[got], &views[got], got >= 3 ? n : cells, got >= 3 ? "B" : "d",
                       got >= 3 ? 1 : sizeof(double), got == 3, names[got])) break;
    if (got < 5) {
        for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
        return NULL;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = check_optimal(n, views[0].buf, views[1].buf, views[2].buf, tol, mean_tol, views[3].buf, views[4].buf);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 5; i++) PyBuffer_Release(&views[i]);
    if (status < 0) return PyErr_NoMemory();
    return PyLong_FromLong(status);
}

static PyMethodDef methods[] = {
    {"solve", solve, METH_VARARGS,
     "solve(m, n, weights, targets, diagonal, out, tol) -> blocks: (17)'s exact optimum on m rows of n columns "
     "written to out (float64, C order; weights and targets likewise); the diagonal edge from row j goes from "
     "column diagonal[j] - 1 to column diagonal[j] of row j + 1 (int32, m - 1 values; j + 1 for (17) itself); a "
     "region splits where an upper subset gains more than tol times the sum of |w (t - mean)| over it."},
    {"check", check, METH_VARARGS,
     "check(n, weights, targets, x, split, merged, tol, mean_tol) -> 1, 0 or 2: 1 where x (n x n, float64, C "
     "order, feasible for (17), the rows of each merged run equal; merged: uint8, n values, 1 on a row of a run of "
     "two rows or more) is (17)'s optimum: every level set of x has its weighted mean of the targets within "
     "mean_tol of its value and no upper subset of it gains more than tol times the sum of |w (t - mean)| over it; "
     "0 where a level set has such a subset (split, uint8, n values, marks the rows where the subset's cut moves "
     "from the row above); 2 where a level set is not at its mean."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_eq17_partition", NULL, -1, methods, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__eq17_partition(void) { return PyModule_Create(&module); }
