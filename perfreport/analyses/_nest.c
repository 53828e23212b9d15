/*
 * _nest.c - the call-stack sweep of nesting.py in one pass, without sorting the points.
 *
 * ``nesting.nest`` recovers the nesting of CPU events from their spans: the 2n sweep points
 * (the open and the close of every event) are put in order, then a stack of open events is
 * swept over them. The pure-numpy path (``sweep_order`` + ``parents_from_sweep``) sorts all
 * points with ``np.lexsort`` and works with whole-array operations; it is the reference, and
 * this module must give the very same parents and depths. Here, per group (thread):
 *
 *  - the events are sorted by start (a thread's events come in file order: a few long runs
 *    in start order, merged in a few passes, see sort_spans);
 *  - the closes come out of a min-heap of the open events keyed by end, so the points are
 *    produced in time order without sorting them;
 *  - the points of one instant (opens at t, closes at t, and the close of each zero-duration
 *    event opened at t) are ordered by the keys of ``_instant_order_keys`` (class, sub1,
 *    sub2, then the point id: the order the numpy path's stable sorts leave them in);
 *  - the sweep: an open records the current stack height as the event's depth and the top
 *    of the stack as its parent, then pushes the event; a close pops the newest open event
 *    (whichever it is, as the numpy path's level arithmetic does).
 *
 * Python calls
 *
 *     nest(group, start, dur, row, n_groups, parent, depth) -> None
 *
 * with per event ``group`` (int64, in [0, n_groups)), ``start`` and ``dur`` (float64, finite,
 * dur >= 0), ``row`` (int64, the file-order tie-break); ``parent`` and ``depth`` (int64) are
 * written. NaN times or durations are the caller's to exclude (the numpy path orders them by
 * numpy's NaN rules).
 *
 *     nest_rows(rows, group, start, dur, n_groups, parent, depth) -> bool
 *
 * is the same sweep as the call stack uses it (``nesting.nest_rows``): the events are the
 * ``rows`` of whole columns, gathered here (negative durations as 0), the rows break the ties,
 * and each answer is written at the event's row (a parent named by its row) of ``parent`` and
 * ``depth``, which cover the whole columns (int64, or both int32: the call stack's, half the
 * bytes held through a rank's analyses); False, with nothing written, when a span is not
 * finite. And
 *
 *     span_order(group, start, key2, n_groups, out) -> None
 *
 * writes into ``out`` (int64) the permutation ``np.lexsort((key2, start, group))`` gives, by
 * the same counting sort and natural merge sort (``ordering.span_order``).
 *
 *     tree_sum(order, parent, acc, integer) -> None
 *     tree_sum2(order, parent, count, total) -> None
 *     tree_inherit(order, parent, out, nearest) -> None
 *
 * are the level passes of ``callstack.reduce_levels`` (np.add) and ``callstack.topmost_match``
 * / ``nearest_match`` as one loop over the nodes in level order (``order``: the nodes, deepest
 * level first): a sum visits them forwards and adds each node into its parent, in the order
 * ``np.add.at`` does level by level (the same float sums); an inheritance visits them backwards
 * (shallowest first), so a parent's answer is final before its children read it; tree_sum2
 * is two sums (int64 and float64) in one loop. ``order`` and ``parent`` are int64 or int32 each.
 *
 *     level_order(depth, counts, order) -> int
 *
 * is ``callstack.levels`` as a counting sort: the nodes (depth >= 0) deepest first, each depth in
 * ascending position (``depth`` and ``order`` int64 or int32 each).
 *
 *     last_at_or_before(values, pos, threshold, out, max_steps) -> None
 *
 * answers ``launch.last_at_or_before`` by jumps to the previous larger value (see there), and
 *
 *     last_key_at_or_before(key_sorted, ts_sorted, key, ts, out) -> bool
 *
 * ``launch._last_key_at_or_before`` with a cursor per key.
 *
 *     layer_claim(starts, ends, free, seg, cum[, scratch]) -> None
 *
 * is one layer of ``stake._claims``: the layer's intervals given as positions among the sorted
 * edges (``starts``, ``ends``: int64), ``free`` (uint8 per segment, cleared where the layer
 * claims), ``seg`` the segments' lengths; writes ``cum`` (float64, segments + 1): the running
 * integral of the layer's rate, 1 / (intervals active) on each segment it claims (active and
 * free), 0 elsewhere, summed in segment order as the numpy path's cumsum over the claimed
 * segments does (the same floats). ``scratch`` (int64, as ``cum``; zeros, given back as zeros)
 * holds the count changes per bound: the caller's, reused by every layer of a claim, instead of
 * a fresh zeroed block per layer. Only the Python C API is used (buffers in, buffers out); the
 * GIL is released during each pass.
 *
 *     class_claim(cls, starts, ends, seg, top, rate, under, cum) -> None
 *
 * is the segment pass of ``attribution._gpu_parts``: events of classes 0..n_cls-1 (priority
 * order) given as positions among the sorted edges; per segment j (``seg``: nb - 1 lengths) the
 * first class running (``top``, int64, nb: -1 where none and at the last bound), its rate
 * 1 / (its events running) (``rate``, float64, nb: 0 where none), whether a class-0 event runs
 * (``under``, float64 0/1, nb - 1) and per class the running integral of its rate over the
 * segments it holds (``cum``, float64, n_cls x nb, row c: 0 at bound 0), summed in segment order
 * as the numpy path's cumsum of the held rates does (the same floats). ``cum`` must come zeroed:
 * the rows of classes without events are left as they are (never touched: a zeroed buffer's
 * untouched pages cost nothing, and a 1 GB rank's four rows are ~100 MB).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The float sums here must be the numpy reference's, operation for operation: no fused
 * multiply-add (layer_claim's products and sums are numpy's two separate roundings). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* One point of an instant that holds several, with its sort keys. */
typedef struct {
    int cls;          /* -1..3, see sort_instant */
    double sub1;      /* duration key */
    int64_t sub2;     /* file-order key */
    int64_t point;    /* open: the event, close: n + the event; the last key */
} Key;

/* The last key is the point id: np.lexsort is stable, so the numpy path meets the points of
 * one instant in ascending point id, and its tie sort is stable too. */
static int key_less(const Key *a, const Key *b)
{
    if (a->cls != b->cls) return a->cls < b->cls;
    if (a->sub1 != b->sub1) return a->sub1 < b->sub1;
    if (a->sub2 != b->sub2) return a->sub2 < b->sub2;
    return a->point < b->point;
}

static int key_cmp(const void *x, const void *y)
{
    const Key *a = x, *b = y;
    return key_less(a, b) ? -1 : (key_less(b, a) ? 1 : 0);
}

/*
 * Sort the m points of one instant (their ids in keys[k].point) by the keys of
 * _instant_order_keys: positive closes, then positive opens, when the instant holds both
 * (back-to-back siblings: the ending event closes first); otherwise opens before closes.
 * Zero-duration points sit between (class 1), except at an instant holding both, where one
 * written before the first opening event goes first (-1) and any other last (3). Opens:
 * longer first, then file order. Closes: shorter first, then reverse file order. Zero
 * points: open before close.
 */
static void sort_instant(Key *keys, int64_t m, int64_t n, const double *dur, const int64_t *row)
{
    int has_open = 0, has_close = 0;
    int64_t first_open_row = INT64_MAX;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = keys[k].point;
        int is_open = p < n;
        int64_t ev = is_open ? p : p - n;
        if (dur[ev] == 0.0)
            continue;
        if (is_open) {
            has_open = 1;
            if (row[ev] < first_open_row) first_open_row = row[ev];
        } else {
            has_close = 1;
        }
    }
    int both = has_open && has_close;
    for (int64_t k = 0; k < m; k++) {
        Key *key = &keys[k];
        int is_open = key->point < n;
        int64_t ev = is_open ? key->point : key->point - n;
        double d = dur[ev];
        key->sub2 = is_open ? row[ev] : -row[ev];
        if (d == 0.0) {
            key->cls = both ? (row[ev] < first_open_row ? -1 : 3) : 1;
            key->sub1 = is_open ? 0.0 : 1.0;
        } else {
            key->cls = is_open ? (both ? 2 : 0) : (both ? 0 : 2);
            key->sub1 = is_open ? -d : d;
        }
    }
    if (m <= 32) {  /* insertion sort: instants hold two or three points almost always */
        for (int64_t i = 1; i < m; i++) {
            Key cur = keys[i];
            int64_t j = i;
            while (j > 0 && key_less(&cur, &keys[j - 1])) {
                keys[j] = keys[j - 1];
                j--;
            }
            keys[j] = cur;
        }
    } else {
        qsort(keys, (size_t)m, sizeof(Key), key_cmp);
    }
}

/* Is event x before event y: by start, then by key2 when given. */
static inline int span_less(int64_t x, int64_t y, const double *start, const double *key2)
{
    if (start[x] != start[y])
        return start[x] < start[y];
    return key2 && key2[x] < key2[y];
}

/* An order-keeping integer image of a finite double (-0.0 as 0.0, which compare equal). */
static inline uint64_t sortable_bits(double d)
{
    uint64_t u;
    if (d == 0.0)
        d = 0.0;
    memcpy(&u, &d, sizeof u);
    return (u >> 63) ? ~u : u | ((uint64_t)1 << 63);
}

#define RADIX_BITS 11
#define RADIX_RUNS 256 /* more ascending runs than this: radix sort (log2 merge passes > 8) */

/* One stable pass per RADIX_BITS digit of key[0..m) (the digits all keys share skipped), the
 * permutation *a moved along with it through tmp; *a, *key end where the result is. */
static void radix_passes(int64_t **a, int64_t **tmp, uint64_t **key, uint64_t **key_tmp, int64_t m, int64_t *count)
{
    const uint64_t mask = ((uint64_t)1 << RADIX_BITS) - 1;
    for (int shift = 0; shift < 64; shift += RADIX_BITS) {
        memset(count, 0, ((size_t)1 << RADIX_BITS) * sizeof(int64_t));
        for (int64_t i = 0; i < m; i++)
            count[((*key)[i] >> shift) & mask]++;
        if (count[((*key)[0] >> shift) & mask] == m)
            continue; /* every key has this digit: the pass would not move anything */
        int64_t total = 0;
        for (uint64_t d = 0; d <= mask; d++) {
            int64_t c = count[d];
            count[d] = total;
            total += c;
        }
        for (int64_t i = 0; i < m; i++) {
            int64_t at = count[((*key)[i] >> shift) & mask]++;
            (*key_tmp)[at] = (*key)[i];
            (*tmp)[at] = (*a)[i];
        }
        uint64_t *swap_key = *key;
        *key = *key_tmp;
        *key_tmp = swap_key;
        int64_t *swap = *a;
        *a = *tmp;
        *tmp = swap;
    }
}

/*
 * a[0..m) sorted stably by (start, key2) (key2 may be NULL), by a least-significant-digit radix
 * sort of the values' bits, RADIX_BITS at a time: key2's, then start's. The result is in a or
 * tmp: the returned pointer says which; NULL when out of memory or a key2 is not finite (the
 * merge sort decides then, as the comparison does). For threads whose events do not come in a
 * few runs: an old profiler (the 2021 TensorBoard plugin's sample trace) lists a thread's events
 * in ~500,000 runs per 1.4 M events, where merging pairs of runs took ~20 passes of scattered
 * reads. Equal keys keep their order, as in the merge sort.
 */
static int64_t *radix_spans(int64_t *a, int64_t *tmp, int64_t m, const double *start, const double *key2)
{
    uint64_t *key = malloc((size_t)m * sizeof(uint64_t)), *key_tmp = malloc((size_t)m * sizeof(uint64_t));
    int64_t *count = malloc(((size_t)1 << RADIX_BITS) * sizeof(int64_t));
    int64_t *out = NULL;
    if (!key || !key_tmp || !count)
        goto done;
    if (key2) {
        for (int64_t i = 0; i < m; i++) {
            if (!isfinite(key2[a[i]]))
                goto done;
            key[i] = sortable_bits(key2[a[i]]);
        }
        radix_passes(&a, &tmp, &key, &key_tmp, m, count);
    }
    for (int64_t i = 0; i < m; i++)
        key[i] = sortable_bits(start[a[i]]);
    radix_passes(&a, &tmp, &key, &key_tmp, m, count);
    out = a;
done:
    free(key);
    free(key_tmp);
    free(count);
    return out;
}

/*
 * Sort the events a[0..m) by (start, key2) stably (key2 may be NULL: by start only), `tmp` a
 * scratch of m. A natural merge sort: a thread's events come in file order, which Kineto
 * writes as a few long runs in start order (operators, then runtime calls, ...), so a few
 * passes that each merge pairs of consecutive runs; events in more runs than RADIX_RUNS are
 * radix sorted (radix_spans). The result ends in a or in tmp: the returned pointer says which.
 */
static int64_t *sort_spans(int64_t *a, int64_t *tmp, int64_t m, const double *start, const double *key2)
{
    if (m > RADIX_RUNS) {
        int64_t runs = 1;
        for (int64_t i = 1; i < m && runs <= RADIX_RUNS; i++)
            runs += span_less(a[i], a[i - 1], start, key2);
        if (runs > RADIX_RUNS) {
            int64_t *sorted = radix_spans(a, tmp, m, start, key2);
            if (sorted)
                return sorted;
        }
    }
    for (;;) {
        int64_t runs = 0, i = 0;
        while (i < m) {  /* merge each pair of consecutive ascending runs of a into tmp */
            int64_t mid = i + 1;
            while (mid < m && !span_less(a[mid], a[mid - 1], start, key2)) mid++;
            if (mid == m && i == 0)
                return a;  /* one run: sorted */
            int64_t hi = mid < m ? mid + 1 : m;
            while (hi < m && !span_less(a[hi], a[hi - 1], start, key2)) hi++;
            int64_t l = i, r = mid, o = i;
            while (l < mid && r < hi)  /* ties from the left run first: stable */
                tmp[o++] = span_less(a[r], a[l], start, key2) ? a[r++] : a[l++];
            while (l < mid) tmp[o++] = a[l++];
            while (r < hi) tmp[o++] = a[r++];
            runs++;
            i = hi;
        }
        int64_t *swap = a;
        a = tmp;
        tmp = swap;
        if (runs <= 1)
            return a;
    }
}

/* Event ids 0..n-1 bucketed by group into `bucket` (a stable counting sort); offset[g] ..
 * offset[g + 1] is group g's part. */
static void bucket_by_group(int64_t n, int64_t n_groups, const int64_t *group, int64_t *offset,
                            int64_t *fill, int64_t *bucket)
{
    for (int64_t e = 0; e < n; e++)
        offset[group[e] + 1]++;
    for (int64_t g = 0; g < n_groups; g++)
        offset[g + 1] += offset[g];
    memcpy(fill, offset, ((size_t)n_groups + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < n; e++)
        bucket[fill[group[e]]++] = e;
}

/* Min-heap of open events by end time (start + dur, computed as numpy computes it). */
typedef struct {
    double end;
    int64_t ev;
} Open;

typedef struct {
    Open *item;
    int64_t size;
} Heap;

static void heap_push(Heap *h, double end, int64_t ev)
{
    int64_t k = h->size++;
    while (k > 0 && h->item[(k - 1) / 2].end > end) {
        h->item[k] = h->item[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    h->item[k] = (Open){end, ev};
}

static void heap_pop(Heap *h)
{
    Open last = h->item[--h->size];
    int64_t k = 0;
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= h->size)
            break;
        if (c + 1 < h->size && h->item[c + 1].end < h->item[c].end)
            c++;
        if (!(h->item[c].end < last.end))
            break;
        h->item[k] = h->item[c];
        k = c;
    }
    h->item[k] = last;
}

/* Item i of an array of int32 (``wide`` 0) or int64 (``wide`` 1) integers: the call stack's
 * parents, depths and level orders are int32 where the rows fit (perfreport.analyses.callstack),
 * half the bytes of the arrays held through a rank's analyses; HTA's call graph passes int64. */
static inline int64_t int_at(const void *a, int wide, int64_t i)
{
    return wide ? ((const int64_t *)a)[i] : (int64_t)((const int32_t *)a)[i];
}

static inline void int_put(void *a, int wide, int64_t i, int64_t v)
{
    if (wide)
        ((int64_t *)a)[i] = v;
    else
        ((int32_t *)a)[i] = (int32_t)v;
}

/* 1 for a buffer of int64 items, 0 for int32, -1 otherwise (asked for with PyBUF_FORMAT). */
static int int_width(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    if (v->itemsize == 8 && (f[0] == 'l' || f[0] == 'q') && !f[1])
        return 1;
    if (v->itemsize == 4 && (f[0] == 'i' || f[0] == 'l') && !f[1])
        return 0;
    return -1;
}

typedef struct {
    int64_t n, height, *stack;
    void *parent, *depth;    /* int64, or int32 where `wide` is 0 (see int_put) */
    int wide;
    const int64_t *out_row;  /* where event p's answers go, and its name as a parent (NULL: p) */
} Sweep;

/* One point of the sweep: an open records depth and parent and pushes, a close pops. */
static void sweep_point(Sweep *s, int64_t p)
{
    if (p < s->n) {
        int64_t o = s->out_row ? s->out_row[p] : p;
        int_put(s->depth, s->wide, o, s->height);
        int_put(s->parent, s->wide, o, s->height ? s->stack[s->height - 1] : -1);
        s->stack[s->height++] = o;
    } else {
        s->height--;  /* never below 0: an event's close never precedes its open */
    }
}

/* The sweep over one thread's events, `ev` sorted by start: each instant (the opens at time t
 * and the closes of the open events ending at t) is ordered by the tie rules, then swept.
 * Returns 0, or -1 when out of memory. */
static int sweep_group(Sweep *s, Heap *heap, Key **keys, int64_t *cap, const int64_t *ev, int64_t m,
                       const double *start, const double *dur, const int64_t *row)
{
    int64_t n = s->n, i = 0;
    heap->size = 0;
    while (i < m || heap->size) {
        double t = i < m ? start[ev[i]] : 0.0;
        if (heap->size && (i >= m || heap->item[0].end < t))
            t = heap->item[0].end;
        int64_t k = 0;
        for (;;) {  /* collect the instant's points */
            int64_t p;
            if (i < m && start[ev[i]] == t) {
                p = ev[i++];
                if (dur[p] != 0.0)
                    heap_push(heap, start[p] + dur[p], p);
            } else if (heap->size && heap->item[0].end == t) {
                p = n + heap->item[0].ev;
                heap_pop(heap);
            } else {
                break;
            }
            if (k + 2 > *cap) {
                int64_t grown_cap = 2 * (k + 2);
                Key *grown = realloc(*keys, (size_t)grown_cap * sizeof(Key));
                if (!grown)
                    return -1;
                *keys = grown;
                *cap = grown_cap;
            }
            (*keys)[k++].point = p;
            if (p < n && dur[p] == 0.0)
                (*keys)[k++].point = n + p;  /* a zero-duration event closes at its opening instant */
        }
        if (k == 1) {
            sweep_point(s, (*keys)[0].point);
            continue;
        }
        sort_instant(*keys, k, n, dur, row);
        for (int64_t j = 0; j < k; j++)
            sweep_point(s, (*keys)[j].point);
    }
    return 0;
}

/* The whole pass: events bucketed by group (counting sort), each bucket sorted by start and
 * swept. 0, or -1 when out of memory. */
static int nest_pass(int64_t n, int64_t n_groups, const int64_t *group, const double *start,
                     const double *dur, const int64_t *row, const int64_t *out_row, void *parent,
                     void *depth, int wide)
{
    size_t words = (size_t)(n ? n : 1);
    int64_t *offset = calloc((size_t)n_groups + 1, sizeof(int64_t));
    int64_t *fill = malloc(((size_t)n_groups + 1) * sizeof(int64_t));
    int64_t *bucket = malloc(words * sizeof(int64_t)), *tmp = malloc(words * sizeof(int64_t));
    Sweep s = {n, 0, malloc(words * sizeof(int64_t)), parent, depth, wide, out_row};
    Heap heap = {malloc(words * sizeof(Open)), 0};
    Key *keys = NULL;
    int64_t cap = 0;
    int rc = -1;
    if (!offset || !fill || !bucket || !tmp || !s.stack || !heap.item)
        goto done;
    bucket_by_group(n, n_groups, group, offset, fill, bucket);
    rc = 0;
    for (int64_t g = 0; g < n_groups && rc == 0; g++) {
        int64_t lo = offset[g], m = offset[g + 1] - lo;
        if (m == 0)
            continue;
        int64_t *sorted = sort_spans(bucket + lo, tmp + lo, m, start, NULL);
        rc = sweep_group(&s, &heap, &keys, &cap, sorted, m, start, dur, row);
    }
done:
    free(keys);
    free(heap.item);
    free(s.stack);
    free(tmp);
    free(bucket);
    free(fill);
    free(offset);
    return rc;
}

/* The permutation np.lexsort((key2, start, group)) into `out`: bucketed by group, each bucket
 * sorted stably by (start, key2). 0, or -1 when out of memory. */
static int span_order_pass(int64_t n, int64_t n_groups, const int64_t *group, const double *start,
                           const double *key2, int64_t *out)
{
    int64_t *offset = calloc((size_t)n_groups + 1, sizeof(int64_t));
    int64_t *fill = malloc(((size_t)n_groups + 1) * sizeof(int64_t));
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    int rc = -1;
    if (offset && fill && tmp) {
        bucket_by_group(n, n_groups, group, offset, fill, out);
        for (int64_t g = 0; g < n_groups; g++) {
            int64_t lo = offset[g], m = offset[g + 1] - lo;
            int64_t *sorted = sort_spans(out + lo, tmp + lo, m, start, key2);
            if (sorted != out + lo)
                memcpy(out + lo, sorted, (size_t)m * sizeof(int64_t));
        }
        rc = 0;
    }
    free(tmp);
    free(fill);
    free(offset);
    return rc;
}

/* A C-contiguous buffer of `count` int64/float64 items (writable when asked); `function` and
 * `column` name it in the error. */
static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t count, int writable, const char *function,
                      const char *column)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->len != count * 8) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %zd bytes, expected %zd", function, column, view->len, count * 8);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void release(Py_buffer *views, int count)
{
    for (int k = 0; k < count; k++)
        PyBuffer_Release(&views[k]);
}

/* Buffers of the `count` columns objs[] (the first holds the int64 group ids), all of one
 * length n, those from index `first_out` on writable; checks every group id is in
 * [0, n_groups). Returns n, or -1 with an exception set and no view held. */
static Py_ssize_t open_columns(PyObject **objs, const char **names, int count, int first_out, Py_ssize_t n_groups,
                               Py_buffer *views, const char *what)
{
    Py_buffer probe;
    if (PyObject_GetBuffer(objs[0], &probe, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    Py_ssize_t n = probe.len / (Py_ssize_t)sizeof(int64_t);
    PyBuffer_Release(&probe);
    for (int k = 0; k < count; k++) {
        if (get_buffer(objs[k], &views[k], n, k >= first_out, what, names[k]) < 0) {
            release(views, k);
            return -1;
        }
    }
    const int64_t *group = views[0].buf;
    for (Py_ssize_t e = 0; e < n; e++) {
        if (group[e] < 0 || group[e] >= n_groups) {
            release(views, count);
            PyErr_Format(PyExc_ValueError, "%s: a group id is outside [0, n_groups)", what);
            return -1;
        }
    }
    return n;
}

/* Release the views; None, or MemoryError when the pass ran out of memory (rc -1). */
static PyObject *close_columns(Py_buffer *views, int count, int rc)
{
    release(views, count);
    if (rc == -1)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *nest(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[6];
    static const char *names[6] = {"group", "start", "dur", "row", "parent", "depth"};
    Py_ssize_t n_groups;
    if (!PyArg_ParseTuple(args, "OOOOnOO", &objs[0], &objs[1], &objs[2], &objs[3], &n_groups, &objs[4],
                          &objs[5]))
        return NULL;
    Py_buffer views[6];
    Py_ssize_t n = open_columns(objs, names, 6, 4, n_groups, views, "nest");
    if (n < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = nest_pass(n, n_groups, views[0].buf, views[1].buf, views[2].buf, views[3].buf, NULL, views[4].buf,
                   views[5].buf, 1);
    Py_END_ALLOW_THREADS
    return close_columns(views, 6, rc);
}

/* nest_rows: the call stack's sweep over the events at `rows` of whole columns, without
 * copies in Python: the spans gathered here (negative durations as 0, as np.maximum(dur, 0)
 * gives), the rows themselves the tie-break, the answers written at the rows (a parent named by
 * its row) in `parent` and `depth`, which cover the whole columns. */
static PyObject *nest_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[6];
    Py_ssize_t n_groups;
    if (!PyArg_ParseTuple(args, "OOOOnOO", &objs[0], &objs[1], &objs[2], &objs[3], &n_groups, &objs[4], &objs[5]))
        return NULL;
    /* rows, group (m each); start, dur, parent, depth (whole columns, as long as start; parent and
     * depth int64, or both int32) */
    static const char *names[6] = {"rows", "group", "start", "dur", "parent", "depth"};
    Py_buffer views[6];
    int wide = 1;
    for (int k = 0; k < 6; k++) {
        int flags = PyBUF_C_CONTIGUOUS | (k >= 4 ? PyBUF_WRITABLE | PyBUF_FORMAT : 0);
        if (PyObject_GetBuffer(objs[k], &views[k], flags) < 0) {
            release(views, k);
            return NULL;
        }
        if (k == 4)
            wide = int_width(&views[4]);
        Py_ssize_t size = k >= 4 ? (wide ? 8 : 4) : 8;
        Py_ssize_t want = k == 1 ? views[0].len : k > 2 ? views[2].len / 8 * size : views[k].len;
        if (wide < 0 || (k == 5 && int_width(&views[5]) != wide) || views[k].len % size || views[k].len != want) {
            release(views, k + 1);
            PyErr_Format(PyExc_ValueError, "nest_rows: %s: expected %s items, as many as %s", names[k],
                         k >= 4 ? "int64 or int32 (parent and depth alike)" : "8-byte", k == 1 ? "rows" : "start");
            return NULL;
        }
    }
    Py_ssize_t m = views[0].len / 8, total = views[2].len / 8;
    const int64_t *rows = views[0].buf, *group = views[1].buf;
    for (Py_ssize_t e = 0; e < m; e++) {
        if (rows[e] < 0 || rows[e] >= total || group[e] < 0 || group[e] >= n_groups) {
            release(views, 6);
            PyErr_SetString(PyExc_ValueError, "nest_rows: a row outside the columns or a group outside [0, n_groups)");
            return NULL;
        }
    }
    double *start = malloc((size_t)(m ? m : 1) * sizeof(double)), *dur = malloc((size_t)(m ? m : 1) * sizeof(double));
    int rc = -1, finite = 1;
    if (start && dur) {
        const double *ts = views[2].buf, *du = views[3].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t e = 0; e < m; e++) {
            double d = du[rows[e]];
            start[e] = ts[rows[e]];
            dur[e] = d < 0.0 ? 0.0 : d;
            finite &= isfinite(start[e]) && isfinite(d);
        }
        rc = finite ? nest_pass(m, n_groups, group, start, dur, rows, rows, views[4].buf, views[5].buf, wide) : 0;
        Py_END_ALLOW_THREADS
    }
    free(dur);
    free(start);
    PyObject *done = close_columns(views, 6, rc);
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    return PyBool_FromLong(finite);
}

/* level_order: the nodes (depth >= 0) sorted by depth, deepest first, each depth in ascending
 * position (a counting sort: callstack.levels' order), into the head of `order`; `counts[d]` =
 * nodes at depth d. Returns the number of nodes. */
static PyObject *level_order(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return NULL;
    Py_buffer views[3];
    int flags[3] = {PyBUF_C_CONTIGUOUS | PyBUF_FORMAT, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE,
                    PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT};
    for (int k = 0; k < 3; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], flags[k]) < 0) {
            release(views, k);
            return NULL;
        }
    }
    int wd = int_width(&views[0]), wo = int_width(&views[2]); /* depth, order: int32 or int64 each */
    int ok = wd >= 0 && wo >= 0 && views[1].len % 8 == 0;
    Py_ssize_t n = ok ? views[0].len / (wd ? 8 : 4) : 0, levels = views[1].len / 8, m = ok ? views[2].len / (wo ? 8 : 4) : 0;
    const void *depth = views[0].buf;
    int64_t *counts = views[1].buf;
    void *order = views[2].buf;
    Py_ssize_t nodes = 0;
    if (ok)
        memset(counts, 0, (size_t)levels * 8);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        int64_t d = int_at(depth, wd, i);
        if (d < 0)
            continue;
        if (d >= levels) {
            ok = 0;
            break;
        }
        counts[d]++;
        nodes++;
    }
    if (!ok || nodes > m || (!wo && n > INT32_MAX)) {
        release(views, 3);
        PyErr_SetString(PyExc_ValueError, "level_order: expected an int64 or int32 depth below len(counts), room "
                                          "in order (int64 or int32) for the nodes");
        return NULL;
    }
    int64_t *fill = malloc((size_t)(levels ? levels : 1) * sizeof(int64_t));
    if (!fill) {
        release(views, 3);
        return PyErr_NoMemory();
    }
    int64_t at = 0;
    for (Py_ssize_t d = levels - 1; d >= 0; d--) {
        fill[d] = at;
        at += counts[d];
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t d = int_at(depth, wd, i);
        if (d >= 0)
            int_put(order, wo, fill[d]++, i);
    }
    Py_END_ALLOW_THREADS
    free(fill);
    release(views, 3);
    return PyLong_FromSsize_t(nodes);
}

static PyObject *span_order(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    static const char *names[4] = {"group", "start", "key2", "out"};
    Py_ssize_t n_groups;
    if (!PyArg_ParseTuple(args, "OOOnO", &objs[0], &objs[1], &objs[2], &n_groups, &objs[3]))
        return NULL;
    Py_buffer views[4];
    Py_ssize_t n = open_columns(objs, names, 4, 3, n_groups, views, "span_order");
    if (n < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = span_order_pass(n, n_groups, views[0].buf, views[1].buf, views[2].buf, views[3].buf);
    Py_END_ALLOW_THREADS
    return close_columns(views, 4, rc);
}

/* Buffers order (m items), parent (n), both int64 or int32 (*wo, *wp: 1 for int64), values
 * (8-byte items, n, writable). */
static int open_tree(PyObject **objs, Py_buffer *views, const char *what, Py_ssize_t *m, Py_ssize_t *n, int *wo,
                     int *wp)
{
    if (PyObject_GetBuffer(objs[0], &views[0], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (PyObject_GetBuffer(objs[1], &views[1], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        release(views, 1);
        return -1;
    }
    if (PyObject_GetBuffer(objs[2], &views[2], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release(views, 2);
        return -1;
    }
    *wo = int_width(&views[0]);
    *wp = int_width(&views[1]);
    *m = *wo >= 0 ? views[0].len / (*wo ? 8 : 4) : 0;
    *n = *wp >= 0 ? views[1].len / (*wp ? 8 : 4) : 0;
    if (*wo < 0 || *wp < 0 || views[2].len != *n * 8) {
        release(views, 3);
        PyErr_Format(PyExc_ValueError, "%s: expected int64 or int32 order and parent, 8-byte values as long as parent",
                     what);
        return -1;
    }
    const void *order = views[0].buf, *parent = views[1].buf;
    for (Py_ssize_t k = 0; k < *m; k++) {
        int64_t i = int_at(order, *wo, k);
        if (i < 0 || i >= *n || int_at(parent, *wp, i) < -1 || int_at(parent, *wp, i) >= *n) {
            release(views, 3);
            PyErr_Format(PyExc_ValueError, "%s: a node or its parent is outside the arrays", what);
            return -1;
        }
    }
    return 0;
}

static PyObject *tree_sum(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    int integer;
    if (!PyArg_ParseTuple(args, "OOOp", &objs[0], &objs[1], &objs[2], &integer))
        return NULL;
    Py_buffer views[3];
    Py_ssize_t m, n;
    int wo, wp;
    if (open_tree(objs, views, "tree_sum", &m, &n, &wo, &wp) < 0)
        return NULL;
    const void *order = views[0].buf, *parent = views[1].buf;
    Py_BEGIN_ALLOW_THREADS
    if (integer) {
        int64_t *acc = views[2].buf;
        for (Py_ssize_t k = 0; k < m; k++) {
            int64_t i = int_at(order, wo, k), p = int_at(parent, wp, i);
            if (p >= 0)
                acc[p] += acc[i];
        }
    } else {
        double *acc = views[2].buf;
        for (Py_ssize_t k = 0; k < m; k++) {
            int64_t i = int_at(order, wo, k), p = int_at(parent, wp, i);
            if (p >= 0)
                acc[p] += acc[i];
        }
    }
    Py_END_ALLOW_THREADS
    release(views, 3);
    Py_RETURN_NONE;
}

/* tree_sum of two columns in one loop: `count` (int64) and `total` (float64), each node added
 * into its parent in `order`, the additions of tree_sum's (the same float sums). */
static PyObject *tree_sum2(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3]))
        return NULL;
    Py_buffer views[3], second;
    Py_ssize_t m, n;
    int wo, wp;
    if (open_tree(objs, views, "tree_sum2", &m, &n, &wo, &wp) < 0)
        return NULL;
    if (PyObject_GetBuffer(objs[3], &second, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release(views, 3);
        return NULL;
    }
    if (second.len != n * 8) {
        PyBuffer_Release(&second);
        release(views, 3);
        PyErr_SetString(PyExc_ValueError, "tree_sum2: expected a float64 total as long as parent");
        return NULL;
    }
    const void *order = views[0].buf, *parent = views[1].buf;
    int64_t *count = views[2].buf;
    double *total = second.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = int_at(order, wo, k), p = int_at(parent, wp, i);
        if (p >= 0) {
            count[p] += count[i];
            total[p] += total[i];
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&second);
    release(views, 3);
    Py_RETURN_NONE;
}

static PyObject *tree_inherit(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    int nearest;
    if (!PyArg_ParseTuple(args, "OOOp", &objs[0], &objs[1], &objs[2], &nearest))
        return NULL;
    Py_buffer views[3];
    Py_ssize_t m, n;
    int wo, wp;
    if (open_tree(objs, views, "tree_inherit", &m, &n, &wo, &wp) < 0)
        return NULL;
    const void *order = views[0].buf, *parent = views[1].buf;
    int64_t *out = views[2].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = m - 1; k >= 0; k--) {
        int64_t i = int_at(order, wo, k), p = int_at(parent, wp, i);
        if (p < 0)
            continue;
        if (nearest ? out[i] < 0 : out[p] >= 0)
            out[i] = out[p];
    }
    Py_END_ALLOW_THREADS
    release(views, 3);
    Py_RETURN_NONE;
}

static PyObject *layer_claim(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[6] = {NULL};
    if (!PyArg_ParseTuple(args, "OOOOO|O", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    int n_views = objs[5] != NULL && objs[5] != Py_None ? 6 : 5;
    Py_buffer views[6];
    int flags[6] = {PyBUF_C_CONTIGUOUS, PyBUF_C_CONTIGUOUS, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, PyBUF_C_CONTIGUOUS,
                    PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE};
    for (int k = 0; k < n_views; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], flags[k]) < 0) {
            release(views, k);
            return NULL;
        }
    }
    Py_ssize_t k = views[0].len / 8, n_seg = views[2].len;
    if (views[0].len % 8 || views[1].len != views[0].len || views[3].len != n_seg * 8
        || views[4].len != (n_seg + 1) * 8 || (n_views == 6 && views[5].len != (n_seg + 1) * 8)) {
        release(views, n_views);
        PyErr_SetString(PyExc_ValueError, "layer_claim: expected int64 starts and ends of one length, uint8 free, "
                                          "float64 seg (one per segment), cum (one more) and int64 scratch as cum");
        return NULL;
    }
    const int64_t *starts = views[0].buf, *ends = views[1].buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (starts[i] < 0 || starts[i] > n_seg || ends[i] < 0 || ends[i] > n_seg) {
            release(views, n_views);
            PyErr_SetString(PyExc_ValueError, "layer_claim: an edge position is outside the segments");
            return NULL;
        }
    }
    /* the counts' changes per bound: in the caller's scratch (zeros, given back as zeros) when
     * there is one, so the layers of one claim reuse its pages instead of faulting fresh ones */
    int64_t *delta = n_views == 6 ? views[5].buf : calloc((size_t)n_seg + 1, sizeof(int64_t));
    if (delta == NULL) {
        release(views, n_views);
        return PyErr_NoMemory();
    }
    uint8_t *free_ = views[2].buf;
    const double *seg = views[3].buf;
    double *cum = views[4].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k; i++) {
        delta[starts[i]] += 1;
        delta[ends[i]] -= 1;
    }
    int64_t active = 0;
    double c = 0.0;
    cum[0] = 0.0;
    for (Py_ssize_t j = 0; j < n_seg; j++) {
        active += delta[j];
        if (active > 0 && free_[j]) {
            c += (1.0 / (double)active) * seg[j];
            free_[j] = 0;
        }
        cum[j + 1] = c;
    }
    if (n_views == 6)
        for (Py_ssize_t i = 0; i < k; i++)
            delta[starts[i]] = delta[ends[i]] = 0;
    Py_END_ALLOW_THREADS
    if (n_views == 5)
        free(delta);
    release(views, n_views);
    Py_RETURN_NONE;
}

/* running_max_per_run(values, starts, out): the running maximum of float64 `values` restarted
 * at each of `starts` (int64 run starts, ascending, the first 0), written into `out`:
 * np.maximum.accumulate over each run, NaN propagating as it does there (a run's maximum is NaN
 * from its first NaN on; of equal values the later one, as numpy gives). numpy needs a call per run:
 * 75,000 calls on a rank of 37,000 steps. */
static PyObject *running_max_per_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return NULL;
    Py_buffer views[3];
    int flags[3] = {PyBUF_C_CONTIGUOUS, PyBUF_C_CONTIGUOUS, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE};
    for (int k = 0; k < 3; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], flags[k]) < 0) {
            release(views, k);
            return NULL;
        }
    }
    Py_ssize_t n = views[0].len / 8, n_runs = views[1].len / 8;
    const int64_t *starts = views[1].buf;
    int ok = views[0].len % 8 == 0 && views[1].len % 8 == 0 && views[2].len == views[0].len;
    for (Py_ssize_t r = 0; ok && r < n_runs; r++)
        ok = starts[r] >= 0 && starts[r] <= n && (r == 0 ? starts[r] == 0 : starts[r] >= starts[r - 1]);
    if (!ok || (n > 0 && n_runs == 0)) {
        release(views, 3);
        PyErr_SetString(PyExc_ValueError, "running_max_per_run: expected float64 values and out of one length and "
                                          "ascending int64 run starts from 0 within them");
        return NULL;
    }
    const double *values = views[0].buf;
    double *out = views[2].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < n_runs; r++) {
        Py_ssize_t lo = starts[r], hi = r + 1 < n_runs ? starts[r + 1] : n;
        double m = lo < hi ? values[lo] : 0.0;
        for (Py_ssize_t i = lo; i < hi; i++) {
            double v = values[i];
            if (!isnan(m) && (isnan(v) || v >= m)) /* (of equal values numpy keeps the later: -0.0, 0.0) */
                m = v;
            out[i] = m;
        }
    }
    Py_END_ALLOW_THREADS
    release(views, 3);
    Py_RETURN_NONE;
}

static PyObject *class_claim(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7]))
        return NULL;
    Py_buffer views[8];
    for (int k = 0; k < 8; k++) {
        int flags = PyBUF_C_CONTIGUOUS | (k >= 4 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[k], &views[k], flags) < 0) {
            release(views, k);
            return NULL;
        }
    }
    Py_ssize_t m = views[0].len / 8, n_gaps = views[3].len / 8, nb = n_gaps + 1;
    Py_ssize_t n_cls = nb ? views[7].len / 8 / nb : 0;
    if (views[0].len % 8 || views[1].len != views[0].len || views[2].len != views[0].len || views[3].len % 8
        || views[4].len != nb * 8 || views[5].len != nb * 8 || views[6].len != n_gaps * 8 || n_cls < 1
        || n_cls > 64 || views[7].len != n_cls * nb * 8) {
        release(views, 8);
        PyErr_SetString(PyExc_ValueError, "class_claim: expected int64 classes, starts and ends of one length, "
                                          "float64 seg, int64 top and float64 rate (one more), float64 under "
                                          "(one per segment) and float64 cum (classes x bounds)");
        return NULL;
    }
    const int64_t *cls = views[0].buf, *starts = views[1].buf, *ends = views[2].buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (cls[i] < 0 || cls[i] >= n_cls || starts[i] < 0 || starts[i] >= nb || ends[i] < 0 || ends[i] >= nb) {
            release(views, 8);
            PyErr_SetString(PyExc_ValueError, "class_claim: a class or an edge position is out of range");
            return NULL;
        }
    }
    int32_t *delta = calloc((size_t)(n_cls * nb), sizeof(int32_t));  /* row c: class c's events opening - closing */
    if (delta == NULL) {
        release(views, 8);
        return PyErr_NoMemory();
    }
    const double *seg = views[3].buf;
    int64_t *top = views[4].buf;
    double *rate = views[5].buf, *under = views[6].buf, *cum = views[7].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) {
        delta[cls[i] * nb + starts[i]] += 1;
        delta[cls[i] * nb + ends[i]] -= 1;
    }
    int64_t active[64] = {0};
    double running[64] = {0.0};
    int has[64] = {0};  /* classes with events: the others' rows of cum stay as given (zeros), untouched */
    for (Py_ssize_t i = 0; i < m; i++)
        has[cls[i]] = 1;
    for (Py_ssize_t j = 0; j < nb; j++) {
        for (Py_ssize_t c = 0; c < n_cls; c++)
            if (has[c])
                cum[c * nb + j] = running[c];
        if (j == n_gaps) {  /* the last bound: no segment after it */
            top[j] = -1;
            rate[j] = 0.0;
            break;
        }
        int64_t first = -1;
        for (Py_ssize_t c = n_cls - 1; c >= 0; c--) {
            active[c] += delta[c * nb + j];
            if (active[c] > 0) first = c;
        }
        under[j] = active[0] > 0 ? 1.0 : 0.0;
        top[j] = first;
        if (first >= 0) {
            rate[j] = 1.0 / (double)active[first];
            running[first] += rate[j] * seg[j];
        } else {
            rate[j] = 0.0;
        }
    }
    Py_END_ALLOW_THREADS
    free(delta);
    release(views, 8);
    Py_RETURN_NONE;
}

/* last_at_or_before(values, pos, threshold, out, max_steps): per query q, the largest
 * j <= pos[q] with !(values[j] < threshold[q]) (a NaN on either side matches), -1 if none, or -2
 * when more than max_steps jumps did not settle it (the caller asks the segment tree then).
 * prev[j] is the largest k < j with !(values[k] <= values[j]): every element between them is at
 * most values[j], so when values[j] misses a threshold they all do, and the search jumps over
 * them. On spans sorted by start with their ends as values, the jumps climb the enclosing spans. */
static PyObject *last_at_or_before(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    Py_ssize_t max_steps;
    if (!PyArg_ParseTuple(args, "OOOOn", &objs[0], &objs[1], &objs[2], &objs[3], &max_steps))
        return NULL;
    Py_buffer views[4];
    for (int k = 0; k < 4; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], PyBUF_C_CONTIGUOUS | (k == 3 ? PyBUF_WRITABLE : 0)) < 0) {
            release(views, k);
            return NULL;
        }
    }
    Py_ssize_t n = views[0].len / 8, q = views[1].len / 8;
    const int64_t *pos = views[1].buf;
    int ok = views[0].len % 8 == 0 && views[1].len % 8 == 0 && views[2].len == views[1].len
             && views[3].len == views[1].len;
    for (Py_ssize_t i = 0; ok && i < q; i++)
        ok = pos[i] < n;
    if (!ok) {
        release(views, 4);
        PyErr_SetString(PyExc_ValueError, "last_at_or_before: expected float64 values, int64 pos below len(values), "
                                          "float64 threshold and int64 out as long as pos");
        return NULL;
    }
    int64_t *prev = malloc((size_t)(n ? n : 1) * sizeof(int64_t)), *stack = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!prev || !stack) {
        free(prev);
        free(stack);
        release(views, 4);
        return PyErr_NoMemory();
    }
    const double *values = views[0].buf, *thr = views[2].buf;
    int64_t *out = views[3].buf;
    Py_BEGIN_ALLOW_THREADS
    int64_t height = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        while (height && values[stack[height - 1]] <= values[j])
            height--;
        prev[j] = height ? stack[height - 1] : -1;
        stack[height++] = j;
    }
    for (Py_ssize_t i = 0; i < q; i++) {
        int64_t j = pos[i];
        Py_ssize_t steps = 0;
        while (j >= 0 && values[j] < thr[i] && steps++ < max_steps)
            j = prev[j];
        out[i] = j >= 0 && values[j] < thr[i] ? -2 : j;
    }
    Py_END_ALLOW_THREADS
    free(stack);
    free(prev);
    release(views, 4);
    Py_RETURN_NONE;
}

/* Last position in ts[lo..hi) (sorted) with ts <= t, lo - 1 if none: searchsorted 'right' - 1. */
static int64_t last_not_after(const double *ts, int64_t lo, int64_t hi, double t)
{
    int64_t a = lo, b = hi;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (ts[mid] <= t)
            a = mid + 1;
        else
            b = mid;
    }
    return a - 1;
}

/* last_key_at_or_before(key_sorted, ts_sorted, key, ts, out) -> bool: per query, the last
 * position of the pairs (key_sorted, ts_sorted), sorted lexicographically, at or before
 * (key, ts); -1 when the key is absent (launch._last_key_at_or_before). Each key's block keeps a
 * cursor: queries in time order per key (launches in launch order) step it forward a little, any
 * other query is a binary search. False, with nothing written, when a time is not finite (the
 * numpy search's NaN order decides then). */
static PyObject *last_key_at_or_before(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    Py_buffer views[5];
    for (int k = 0; k < 5; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], PyBUF_C_CONTIGUOUS | (k == 4 ? PyBUF_WRITABLE : 0)) < 0) {
            release(views, k);
            return NULL;
        }
    }
    Py_ssize_t n = views[0].len / 8, q = views[2].len / 8;
    if (views[0].len % 8 || views[1].len != views[0].len || views[2].len % 8 || views[3].len != views[2].len
        || views[4].len != views[2].len) {
        release(views, 5);
        PyErr_SetString(PyExc_ValueError, "last_key_at_or_before: expected int64 key_sorted and float64 ts_sorted of "
                                          "one length, int64 key, float64 ts and int64 out of another");
        return NULL;
    }
    const int64_t *ks = views[0].buf, *key = views[2].buf;
    const double *tss = views[1].buf, *ts = views[3].buf;
    int64_t *out = views[4].buf;
    int finite = 1;
    for (Py_ssize_t j = 0; j < n && finite; j++)
        finite = isfinite(tss[j]);
    for (Py_ssize_t i = 0; i < q && finite; i++)
        finite = isfinite(ts[i]);
    int64_t blocks = 0;
    for (Py_ssize_t j = 0; j < n; j++)
        blocks += j == 0 || ks[j] != ks[j - 1];
    int64_t *lo = malloc((size_t)(blocks + 1) * sizeof(int64_t)), *cursor = malloc((size_t)(blocks + 1) * sizeof(int64_t));
    if (!lo || !cursor) {
        free(lo);
        free(cursor);
        release(views, 5);
        return PyErr_NoMemory();
    }
    if (finite) {
        Py_BEGIN_ALLOW_THREADS
        int64_t b = 0;
        for (Py_ssize_t j = 0; j < n; j++)
            if (j == 0 || ks[j] != ks[j - 1]) {
                lo[b] = j;
                cursor[b++] = j - 1;
            }
        lo[blocks] = n;
        for (Py_ssize_t i = 0; i < q; i++) {
            int64_t a = 0, z = blocks;  /* the block of key[i]: binary search over the blocks' keys */
            while (a < z) {
                int64_t mid = a + (z - a) / 2;
                if (ks[lo[mid]] < key[i])
                    a = mid + 1;
                else
                    z = mid;
            }
            if (a == blocks || ks[lo[a]] != key[i]) {
                out[i] = -1;
                continue;
            }
            int64_t c = cursor[a], hi = lo[a + 1], steps = 0;
            if (c >= lo[a] && tss[c] > ts[i]) {
                c = last_not_after(tss, lo[a], hi, ts[i]);
            } else {
                while (c + 1 < hi && tss[c + 1] <= ts[i] && steps++ < 16)
                    c++;
                if (c + 1 < hi && tss[c + 1] <= ts[i])
                    c = last_not_after(tss, c + 1, hi, ts[i]);
            }
            out[i] = cursor[a] = c;
        }
        Py_END_ALLOW_THREADS
    }
    free(cursor);
    free(lo);
    release(views, 5);
    return PyBool_FromLong(finite);
}

static PyMethodDef nest_methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(group, start, dur, row, n_groups, parent, depth) -> None\n\n"
     "Nest the spans of each group by the call-stack sweep and its tie rules: writes each\n"
     "event's parent position (-1 at the top) and depth (see nesting.nest)."},
    {"nest_rows", nest_rows, METH_VARARGS,
     "nest_rows(rows, group, start, dur, n_groups, parent, depth) -> bool\n\n"
     "nest() of the events at rows of whole columns (start, dur; negative durations as 0; the rows\n"
     "break ties): writes parent (a row, -1 at the top) and depth at each row (see\n"
     "nesting.nest_rows). False, and nothing written, when a span is not finite."},
    {"level_order", level_order, METH_VARARGS,
     "level_order(depth, counts, order) -> int\n\n"
     "The nodes (depth >= 0) deepest first, each depth in ascending position, into the head of\n"
     "order; the nodes per depth into counts; returns the number of nodes (see callstack.levels)."},
    {"span_order", span_order, METH_VARARGS,
     "span_order(group, start, key2, n_groups, out) -> None\n\n"
     "Write into out the permutation np.lexsort((key2, start, group)) gives (see\n"
     "ordering.span_order): fast on events in file order."},
    {"tree_sum", tree_sum, METH_VARARGS,
     "tree_sum(order, parent, acc, integer) -> None\n\n"
     "Add each node's acc (float64, or int64 when integer) into its parent's, nodes visited in\n"
     "order (deepest level\n"
     "first): callstack.reduce_levels with np.add."},
    {"tree_sum2", tree_sum2, METH_VARARGS,
     "tree_sum2(order, parent, count, total) -> None\n\n"
     "tree_sum of an int64 count and a float64 total in one loop (see callstack.subtree_gpu_work)."},
    {"tree_inherit", tree_inherit, METH_VARARGS,
     "tree_inherit(order, parent, out, nearest) -> None\n\n"
     "Visit the nodes in reverse order (shallowest first); a node takes its parent's out (int64)\n"
     "when the parent has one (topmost_match) or, with nearest, when it has none itself\n"
     "(nearest_match)."},
    {"last_at_or_before", last_at_or_before, METH_VARARGS,
     "last_at_or_before(values, pos, threshold, out, max_steps) -> None\n\n"
     "Per query: the largest j <= pos with values[j] >= threshold (NaN matches), -1 if none, -2\n"
     "when max_steps jumps did not settle it (see launch.last_at_or_before)."},
    {"last_key_at_or_before", last_key_at_or_before, METH_VARARGS,
     "last_key_at_or_before(key_sorted, ts_sorted, key, ts, out) -> bool\n\n"
     "Per query: the last position of the sorted (key, ts) pairs at or before (key, ts), -1 when\n"
     "the key is absent (see launch._last_key_at_or_before); False when a time is not finite."},
    {"running_max_per_run", running_max_per_run, METH_VARARGS,
     "running_max_per_run(values, starts, out): running maximum of float64 values restarted at each int64 run start."},
    {"class_claim", class_claim, METH_VARARGS,
     "class_claim(cls, starts, ends, seg, top, rate, under, cum) -> None\n\n"
     "The segment pass of the attribution's GPU parts: per segment the first class running, its\n"
     "shared rate, whether class 0 runs, and each class's running integral (see attribution._gpu_parts)."},
    {"layer_claim", layer_claim, METH_VARARGS,
     "layer_claim(starts, ends, free, seg, cum[, scratch]) -> None\n\n"
     "One layer of the time at stake: claim the free segments where the layer is active and\n"
     "write the running integral of its shared rate (see stake._claims)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef nest_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_nest",
    .m_doc = "Linear call-stack sweep (see perfreport.analyses.nesting for the reference).",
    .m_size = -1,
    .m_methods = nest_methods,
};

PyMODINIT_FUNC PyInit__nest(void)
{
    PyObject *m = PyModule_Create(&nest_module);
    if (m && PyModule_AddIntConstant(m, "INT32_TREES", 1) < 0) { /* int32 parents, depths and orders */
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
