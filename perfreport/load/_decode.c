/*
 * _decode.c - the per-event loops of the loader's decode that numpy can only do in several
 * column-sized passes. The numpy code in columns.py is the reference; this module is optional
 * (columns.py falls back to it) and must give the same columns.
 *
 *     step_numbers(starts, ends, numbers, ts, skip, out) -> None   (out int64, or int32: STEPS_INT32)
 *
 * The profiler step of every event (columns._iterations): the last step starting at or before
 * the event's start, kept where the event starts before that step ends. In numpy that is a
 * searchsorted of every event (an int64 position column), a gather of the step ends at those
 * positions (a float64 column), two boolean columns and a gather of the numbers: five
 * column-sized arrays, each page-faulted fresh (~2 us per 4 KB page on the test VM), and a
 * binary search per event with a branch mispredicted at every level. Here it is one pass that
 * writes only the result, and the search starts from the previous event's step: events come
 * in file order, mostly in time order within a thread, so the step is nearly always the one
 * before, checked with two comparisons, or a few steps away (last_start_at_or_before).
 *
 *     times_plausible(ph, ts, dur, x_code, m_code, max_dur_us, max_spread_ns) -> bool
 *
 * The usual answer of sanitize.drop_absurd, "no event to drop", in one pass over the scanner's
 * columns: numpy builds a boolean column per reason (eight column-sized passes and arrays)
 * before finding them all empty. False does not mean an event is dropped, only that numpy
 * must look (it stays the one definition of what is dropped). A rank whose starts spread over
 * more than max_spread_ns passes too when no gap between neighbouring starts is that long
 * (buckets, one more pass): sanitize._apart would sort every start to find one run.
 *
 *     earliest_starts(ph, ts, x_code) -> (int | None, int | None)
 *
 * The earliest timestamp of a complete event and of any event (columns.ts_origin_us), in one
 * pass: numpy's masked minimum runs without SIMD, after two boolean columns.
 *
 *     first_of_groups(group, rows, ts) -> None
 *
 * Each launch's first GPU event (columns.link_first_gpu_events): in numpy a lexsort of the
 * linked GPU rows by (launch, start), here one pass that keeps each launch's earliest event.
 * ``group`` (the linked column) is int64 or int32 (module attribute GROUPS_INT32).
 * (The correlation join before it stays in numpy, but for split_by_side: correlation ids are
 * sparse, so a hash table of them missed the cache at every row and lost to numpy's sort of the
 * nearly sorted ids, 75-85 against 45 CPU ms at 1 GB.)
 *
 *     split_by_side(rows, ids, gpu_side, cpu_side, gpu_rows, gpu_ids, cpu_rows, cpu_ids) -> (int, int)
 *
 * The two sides of the correlation join (linking.link_by_correlation): of the event rows
 * holding an id (int32, ascending) and their ids (int64), those with an id >= 0 on a GPU-side
 * event and those on a CPU-side event (gpu_side, cpu_side: a bool per event), written in one
 * pass to the four outputs (int32 rows, int64 ids, each with room for every row); the two
 * counts. numpy: a gather of each mask at the rows and four boolean selections (13 ms for the
 * 1.6 M correlations of the V100-grown 1 GB rank).
 *
 *     dense_ids(rows, values, out) -> bool
 *
 * An id column of every event from a sparse one (columns._scattered): out (int32) is -1, then
 * values (int64) at rows (int32, strictly ascending: an arg's rows), in one pass over the
 * events that writes each entry once. numpy fills the column, checks every value fits, then
 * scatters them: three passes (the External ids of the V100-grown 1 GB rank, 3.35 M of 5.06 M
 * events). False (out unfinished) where a value does not fit int32 or the rows do not ascend:
 * numpy then makes the column.
 *
 *     present_ids(ids, out) -> bool
 *
 * The flow id of every event (columns._flow_ids): ``ids`` (int64, INT_MISSING where an event
 * has none) as int32, -1 where missing, in one pass; False (out unfinished) when an id does
 * not fit in int32, for numpy to make the int64 column. numpy: a mask, its positions, a gather,
 * a fill and a scatter, 6 ms for the 1 M events of the V100-grown 200 MB rank. ``out`` may be
 * the first half of ``ids``'s own memory (the scanner's column, viewed as int32): element i is
 * written after element i and every one before it were read (bytes 4i..4i+3 lie within
 * element i / 2), so the flow ids take no column of fresh pages; when an id does not fit, the
 * ids read so far are written back from their int32 values first (an id of -1 comes back as
 * INT_MISSING: both give -1 in the flow-id column).
 *
 *     relative_us(ts, origin_ns, out) -> None
 *
 * The start of every event in float64 us since the origin (columns._relative_us): ts (int64
 * ns, INT_MISSING where missing: NaN) minus origin_ns, exact in int64 (wrapping as numpy's
 * int64 subtraction does), then one division by 1000. ``out`` may be ``ts``'s own memory (the
 * scanner's column, viewed as float64): element i is read before it is written, so the
 * conversion needs no second column of fresh pages (8 bytes an event, ~2 us per 4 KB page on
 * the test VM).
 *
 *     step_name_table(strings) -> bytearray
 *
 * model.step_name_table of the trace's strings (int64 per string, then -1): the N of each
 * ASCII "ProfilerStep#N" name, matched as its regular expression matches. Every step has a
 * name of its own, so a trace of 204,580 steps has as many, which the regular expression and
 * int() took 0.12 s to read; here a few ms. A name that is not ASCII and starts with
 * "ProfilerStep" (or an entry that is not a str) gets -2: the reference reads it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define INT_MISSING INT64_MIN /* fields.INT_MISSING: kind 'n' without a value */

/* A C-contiguous buffer of `count` items of `size` bytes (writable when asked); `name` is the
 * argument's, for the error. */
static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t count, Py_ssize_t size, int writable,
                      const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->len != count * size) {
        PyErr_Format(PyExc_ValueError, "_decode: %s has %zd bytes, expected %zd", name, view->len,
                     count * size);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The position of the last of the n ascending `starts` that is <= t, -1 when none; `hint` is
 * a guess (the previous answer) searched from: steps of 1, 2, 4 ... away from it bracket the
 * answer, then a binary search within the bracket. Events come mostly in time order, so the
 * answer is nearly always the hint or a step or two away. Where it is not (span events written
 * after their step's), a binary search among all the steps from the start cost 58 ms on the
 * triton example grown to 1 GB (345,319 steps); stepping from the hint, 6 ms. t is not NaN. */
static inline Py_ssize_t last_start_at_or_before(const double *starts, Py_ssize_t n, double t, Py_ssize_t hint)
{
    Py_ssize_t lo = 0, hi = n; /* the answer + 1, the count of starts <= t, is in [lo, hi] */
    if (hint >= 0 && hint < n) {
        Py_ssize_t step = 1;
        if (starts[hint] <= t) { /* the count is past the hint: step forward */
            lo = hint + 1;
            for (;;) {
                Py_ssize_t p = hint + step;
                if (p >= n) {
                    hi = n;
                    break;
                }
                if (starts[p] > t) {
                    hi = p;
                    break;
                }
                lo = p + 1;
                step *= 2;
            }
        } else { /* the count is at most the hint: step back */
            hi = hint;
            for (;;) {
                Py_ssize_t p = hint - step;
                if (p < 0) {
                    lo = 0;
                    break;
                }
                if (starts[p] <= t) {
                    lo = p + 1;
                    break;
                }
                hi = p;
                step *= 2;
            }
        }
    }
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

#define STEP_PASS(NAME, T)                                                                                 \
    static void NAME(const double *starts, const double *ends, const int64_t *numbers, Py_ssize_t n_steps, \
                     const double *ts, const uint8_t *skip, T *out, Py_ssize_t n)                          \
    {                                                                                                      \
        Py_ssize_t pos = -1;                                                                               \
        for (Py_ssize_t i = 0; i < n; i++) {                                                               \
            double t = ts[i];                                                                              \
            if (skip[i] || isnan(t)) { /* NaN: no start (numpy sorts it past every start, then t < end fails) */ \
                out[i] = -1;                                                                               \
                continue;                                                                                  \
            }                                                                                              \
            pos = last_start_at_or_before(starts, n_steps, t, pos);                                        \
            out[i] = pos >= 0 && t < ends[pos] ? (T)numbers[pos] : -1;                                     \
        }                                                                                                  \
    }
STEP_PASS(step_pass, int64_t)
STEP_PASS(step_pass32, int32_t)

static PyObject *step_numbers(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    Py_buffer probe;
    if (PyObject_GetBuffer(objs[0], &probe, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n_steps = probe.len / 8;
    PyBuffer_Release(&probe);
    if (PyObject_GetBuffer(objs[3], &probe, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = probe.len / 8;
    PyBuffer_Release(&probe);
    if (PyObject_GetBuffer(objs[5], &probe, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t width = n && probe.len == n * 4 ? 4 : 8; /* out: int64, or int32 */
    PyBuffer_Release(&probe);
    static const char *names[6] = {"starts", "ends", "numbers", "ts", "skip", "out"};
    const Py_ssize_t count[6] = {n_steps, n_steps, n_steps, n, n, n}, size[6] = {8, 8, 8, 8, 1, width};
    Py_buffer views[6];
    for (int k = 0; k < 6; k++) {
        if (get_buffer(objs[k], &views[k], count[k], size[k], k == 5, names[k]) < 0) {
            while (k--)
                PyBuffer_Release(&views[k]);
            return NULL;
        }
    }
    if (width == 4) { /* every number must fit: refuse rather than wrap */
        const int64_t *numbers = views[2].buf;
        for (Py_ssize_t k = 0; k < n_steps; k++) {
            if (numbers[k] < INT32_MIN || numbers[k] > INT32_MAX) {
                for (int j = 0; j < 6; j++)
                    PyBuffer_Release(&views[j]);
                PyErr_SetString(PyExc_ValueError, "step_numbers: a step number does not fit an int32 out");
                return NULL;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    if (width == 4)
        step_pass32(views[0].buf, views[1].buf, views[2].buf, n_steps, views[3].buf, views[4].buf, views[5].buf, n);
    else
        step_pass(views[0].buf, views[1].buf, views[2].buf, n_steps, views[3].buf, views[4].buf, views[5].buf, n);
    Py_END_ALLOW_THREADS
    for (int k = 0; k < 6; k++)
        PyBuffer_Release(&views[k]);
    Py_RETURN_NONE;
}

/* Whether event a, later in the file than event b, comes before it in the order of
 * np.lexsort((ts, ...)), which is stable and puts NaN last: strictly earlier, or a number
 * where b has NaN. */
static inline int starts_before(double a, double b) { return a < b || (isnan(b) && !isnan(a)); }

/* For each row i with rows[i] and group[i] >= 0 (a GPU event linked to its launch, group[i]),
 * in file order: group[group[i]] becomes the earliest such row of that group by ts, the first
 * in file order among equal times. group[g] of a group row g is -1 before the pass. */
/* first_pass for int64 or int32 groups (the linked column is int32 when its rows fit). */
#define FIRST_PASS(NAME, T)                                                                    \
    static void NAME(T *group, const uint8_t *rows, const double *ts, Py_ssize_t n)              \
    {                                                                                          \
        for (Py_ssize_t i = 0; i < n; i++) {                                                   \
            if (!rows[i] || group[i] < 0)                                                      \
                continue;                                                                      \
            int64_t g = group[i], best = group[g];                                             \
            if (best < 0 || starts_before(ts[i], ts[best]))                                    \
                group[g] = (T)i;                                                               \
        }                                                                                      \
    }
FIRST_PASS(first_pass, int64_t)
FIRST_PASS(first_pass32, int32_t)

/* Buffers of objs[0..count), each n items of size[k] bytes, those with writable[k] writable.
 * n is the length of objs[0] in items of size[0]. Returns n, or -1 with an exception set and
 * no view held. */
static Py_ssize_t open_columns(PyObject **objs, const char **names, const Py_ssize_t *size, const int *writable,
                               int count, Py_buffer *views)
{
    Py_buffer probe;
    if (PyObject_GetBuffer(objs[0], &probe, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    Py_ssize_t n = probe.len / size[0];
    PyBuffer_Release(&probe);
    for (int k = 0; k < count; k++) {
        if (get_buffer(objs[k], &views[k], n, size[k], writable[k], names[k]) < 0) {
            while (k--)
                PyBuffer_Release(&views[k]);
            return -1;
        }
    }
    return n;
}

static PyObject *first_of_groups(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return NULL;
    static const char *names[3] = {"group", "rows", "ts"};
    Py_buffer probe;
    if (PyObject_GetBuffer(objs[1], &probe, PyBUF_C_CONTIGUOUS) < 0) /* rows: one byte an event */
        return NULL;
    Py_ssize_t events = probe.len;
    PyBuffer_Release(&probe);
    if (PyObject_GetBuffer(objs[0], &probe, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t width = events ? probe.len / events : 8; /* group: int64, or int32 */
    PyBuffer_Release(&probe);
    if (width != 4)
        width = 8; /* (a wrong length is reported by open_columns) */
    const Py_ssize_t size[3] = {width, 1, 8};
    static const int writable[3] = {1, 0, 0};
    Py_buffer views[3];
    Py_ssize_t n = open_columns(objs, names, size, writable, 3, views);
    if (n < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = width == 4 ? ((const int32_t *)views[0].buf)[i] : ((const int64_t *)views[0].buf)[i];
        if (g >= n) { /* a row outside the columns: refuse rather than write there */
            for (int k = 0; k < 3; k++)
                PyBuffer_Release(&views[k]);
            PyErr_SetString(PyExc_ValueError, "first_of_groups: a group row is outside the columns");
            return NULL;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    if (width == 4)
        first_pass32(views[0].buf, views[1].buf, views[2].buf, n);
    else
        first_pass(views[0].buf, views[1].buf, views[2].buf, n);
    Py_END_ALLOW_THREADS
    for (int k = 0; k < 3; k++)
        PyBuffer_Release(&views[k]);
    Py_RETURN_NONE;
}


#define GAP_BUCKETS_MAX ((size_t)1 << 20) /* beyond: "unknown", numpy sorts */

/* Whether no two neighbouring timed starts, sorted, are more than max_spread_ns apart (as the
 * difference of their float64 values, as sanitize._apart computes them), given their extremes
 * lo and hi: then they form one run and none is far from the bulk. One pass with buckets half
 * that gap wide: two starts of one bucket are closer than the gap, so a larger gap can only lie
 * between the last start of a bucket and the first of the next bucket holding any. 0 where
 * memory or the number of buckets does not allow the answer (numpy then sorts). */
static int no_far_gap(const int32_t *ph, const int64_t *ts, int32_t m_code, double max_spread_ns, int64_t lo,
                      int64_t hi, Py_ssize_t n)
{
    double width = max_spread_ns / 2, first = (double)lo, span = (double)hi - first;
    if (!(width > 0) || !(span / width < (double)GAP_BUCKETS_MAX))
        return 0;
    size_t nb = (size_t)(span / width) + 1;
    double *bmin = malloc(nb * sizeof(double)), *bmax = malloc(nb * sizeof(double));
    int ok = 0;
    if (bmin && bmax) {
        for (size_t b = 0; b < nb; b++) {
            bmin[b] = INFINITY;
            bmax[b] = -INFINITY;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (ts[i] == INT_MISSING || ph[i] == m_code)
                continue;
            double d = (double)ts[i];
            size_t b = (size_t)((d - first) / width);
            b = b < nb ? b : nb - 1;
            bmin[b] = d < bmin[b] ? d : bmin[b];
            bmax[b] = d > bmax[b] ? d : bmax[b];
        }
        ok = 1;
        double last = NAN; /* the latest start of the buckets before (none yet) */
        for (size_t b = 0; b < nb && ok; b++) {
            if (bmin[b] > bmax[b])
                continue; /* empty */
            if (!isnan(last) && bmin[b] - last > max_spread_ns)
                ok = 0;
            last = bmax[b];
        }
    }
    free(bmax);
    free(bmin);
    return ok;
}

/* Whether every event has a phase; every complete one (ph == x_code) a timestamp and a finite
 * duration in [0, max_dur_us]; and the timed ones (a timestamp, ph != m_code) start within
 * max_spread_ns of each other, as float(latest) - float(earliest), or else without a gap of
 * more than that between neighbours (no_far_gap: on a trace of 345,319 steps of 13.3 s, whose
 * 4.5 M starts sanitize._apart sorted to find one run, drop_absurd took 0.175 s): then
 * drop_absurd drops nothing (no start can be apart from the bulk). */
static int plausible_pass(const int32_t *ph, const int64_t *ts, const double *dur, int32_t x_code, int32_t m_code,
                          double max_dur_us, double max_spread_ns, Py_ssize_t n)
{
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ph[i] == -1)
            return 0;
        if (ph[i] == x_code && (ts[i] == INT_MISSING || !(dur[i] >= 0 && dur[i] <= max_dur_us)))
            return 0; /* !(...): NaN fails both comparisons, inf the second */
        if (ts[i] != INT_MISSING && ph[i] != m_code) {
            lo = ts[i] < lo ? ts[i] : lo;
            hi = ts[i] > hi ? ts[i] : hi;
        }
    }
    return lo > hi || (double)hi - (double)lo <= max_spread_ns ||
           no_far_gap(ph, ts, m_code, max_spread_ns, lo, hi, n);
}

static PyObject *times_plausible(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    int x_code, m_code;
    double max_dur_us, max_spread_ns;
    if (!PyArg_ParseTuple(args, "OOOiidd", &objs[0], &objs[1], &objs[2], &x_code, &m_code, &max_dur_us,
                          &max_spread_ns))
        return NULL;
    static const char *names[3] = {"ph", "ts", "dur"};
    static const Py_ssize_t size[3] = {4, 8, 8};
    static const int writable[3] = {0, 0, 0};
    Py_buffer views[3];
    Py_ssize_t n = open_columns(objs, names, size, writable, 3, views);
    if (n < 0)
        return NULL;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = plausible_pass(views[0].buf, views[1].buf, views[2].buf, x_code, m_code, max_dur_us, max_spread_ns, n);
    Py_END_ALLOW_THREADS
    for (int k = 0; k < 3; k++)
        PyBuffer_Release(&views[k]);
    return PyBool_FromLong(ok);
}

static PyObject *earliest_starts(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[2];
    int x_code;
    if (!PyArg_ParseTuple(args, "OOi", &objs[0], &objs[1], &x_code))
        return NULL;
    static const char *names[2] = {"ph", "ts"};
    static const Py_ssize_t size[2] = {4, 8};
    static const int writable[2] = {0, 0};
    Py_buffer views[2];
    Py_ssize_t n = open_columns(objs, names, size, writable, 2, views);
    if (n < 0)
        return NULL;
    const int32_t *ph = views[0].buf;
    const int64_t *ts = views[1].buf;
    int64_t complete = INT64_MAX, any = INT64_MAX; /* INT_MISSING is INT64_MIN: never a start */
    int has_complete = 0, has_any = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ts[i] == INT_MISSING)
            continue;
        has_any = 1;
        any = ts[i] < any ? ts[i] : any;
        if (ph[i] == x_code) {
            has_complete = 1;
            complete = ts[i] < complete ? ts[i] : complete;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&views[0]);
    PyBuffer_Release(&views[1]);
    PyObject *a = has_complete ? PyLong_FromLongLong(complete) : Py_NewRef(Py_None);
    PyObject *b = has_any ? PyLong_FromLongLong(any) : Py_NewRef(Py_None);
    if (!a || !b) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    return Py_BuildValue("(NN)", a, b);
}


static PyObject *step_prefix(void)
{
    static PyObject *prefix;
    if (!prefix)
        prefix = PyUnicode_InternFromString("ProfilerStep");
    return prefix;
}

/* Python's \s (str.isspace) among ASCII characters. */
static inline int is_re_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* The N of an ASCII "ProfilerStep\s*#\s*(\d+)..." name (capped at INT64_MAX), else -1. */
static int64_t ascii_step_number(const char *p, Py_ssize_t n)
{
    static const char prefix[] = "ProfilerStep";
    Py_ssize_t j = sizeof prefix - 1;
    if (n <= j || memcmp(p, prefix, (size_t)j) != 0)
        return -1;
    while (j < n && is_re_space((unsigned char)p[j]))
        j++;
    if (j >= n || p[j] != '#')
        return -1;
    j++;
    while (j < n && is_re_space((unsigned char)p[j]))
        j++;
    if (j >= n || p[j] < '0' || p[j] > '9')
        return -1;
    int64_t v = 0;
    for (; j < n && p[j] >= '0' && p[j] <= '9'; j++) {
        int d = p[j] - '0';
        v = v > (INT64_MAX - d) / 10 ? INT64_MAX : v * 10 + d;
    }
    return v;
}

static PyObject *step_name_table(PyObject *self, PyObject *strings)
{
    (void)self;
    if (!PyList_Check(strings)) {
        PyErr_SetString(PyExc_TypeError, "step_name_table: expected a list of str");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(strings);
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int64_t));
    if (!out)
        return NULL;
    PyObject *prefix = step_prefix();
    if (!prefix) {
        Py_DECREF(out);
        return NULL;
    }
    int64_t *table = (int64_t *)PyByteArray_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(strings, i);
        if (!PyUnicode_Check(text)) {
            table[i] = -2;
        } else if (PyUnicode_IS_ASCII(text)) {
            table[i] = ascii_step_number((const char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text));
        } else {
            Py_ssize_t starts = PyUnicode_Tailmatch(text, prefix, 0, PY_SSIZE_T_MAX, -1);
            if (starts < 0) {
                Py_DECREF(out);
                return NULL;
            }
            table[i] = starts ? -2 : -1;
        }
    }
    table[n] = -1;
    return out;
}

static PyObject *split_by_side(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7]))
        return NULL;
    Py_buffer rows, gpu_side, views[6]; /* ids, cpu_side, gpu_rows, gpu_ids, cpu_rows, cpu_ids */
    if (PyObject_GetBuffer(objs[0], &rows, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(objs[2], &gpu_side, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&rows);
        return NULL;
    }
    Py_ssize_t m = rows.len / 4, n = gpu_side.len;
    Py_ssize_t room[2]; /* the outputs' lengths (gpu_rows', cpu_rows'): none at a first call, then the counts */
    for (int j = 0; j < 2; j++) {
        Py_buffer probe;
        if (PyObject_GetBuffer(objs[4 + 2 * j], &probe, PyBUF_C_CONTIGUOUS) < 0) {
            PyBuffer_Release(&rows);
            PyBuffer_Release(&gpu_side);
            return NULL;
        }
        room[j] = probe.len / 4;
        PyBuffer_Release(&probe);
    }
    Py_ssize_t n_gpu_room = room[0], n_cpu_room = room[1];
    const Py_ssize_t count[6] = {m, n, n_gpu_room, n_gpu_room, n_cpu_room, n_cpu_room}, size[6] = {8, 1, 4, 8, 4, 8};
    static const char *names[6] = {"ids", "cpu_side", "gpu_rows", "gpu_ids", "cpu_rows", "cpu_ids"};
    static const int at[6] = {1, 3, 4, 5, 6, 7}, writable[6] = {0, 0, 1, 1, 1, 1};
    int k = 0;
    for (; k < 6; k++)
        if (get_buffer(objs[at[k]], &views[k], count[k], size[k], writable[k], names[k]) < 0)
            break;
    Py_ssize_t n_gpu = 0, n_cpu = 0, bad = -1;
    if (k == 6) {
        const int32_t *r = rows.buf;
        const int64_t *id = views[0].buf;
        const uint8_t *on_gpu = gpu_side.buf, *on_cpu = views[1].buf;
        int32_t *g_rows = views[2].buf, *c_rows = views[4].buf;
        int64_t *g_ids = views[3].buf, *c_ids = views[5].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < m; i++) { /* count */
            int32_t row = r[i];
            if (row < 0 || row >= n) {
                bad = i;
                break;
            }
            n_gpu += id[i] >= 0 && on_gpu[row];
            n_cpu += id[i] >= 0 && on_cpu[row];
        }
        if (bad < 0 && n_gpu <= n_gpu_room && n_cpu <= n_cpu_room) { /* then write, where there is room */
            Py_ssize_t kg = 0, kc = 0;
            for (Py_ssize_t i = 0; i < m; i++) {
                int32_t row = r[i];
                if (id[i] < 0)
                    continue;
                if (on_gpu[row]) {
                    g_rows[kg] = row;
                    g_ids[kg++] = id[i];
                }
                if (on_cpu[row]) {
                    c_rows[kc] = row;
                    c_ids[kc++] = id[i];
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&rows);
    PyBuffer_Release(&gpu_side);
    for (int j = 0; j < k; j++)
        PyBuffer_Release(&views[j]);
    if (k < 6)
        return NULL;
    if (bad >= 0) {
        PyErr_Format(PyExc_IndexError, "split_by_side: row %zd of %zd events", bad, n);
        return NULL;
    }
    return Py_BuildValue("(nn)", n_gpu, n_cpu);
}

static PyObject *dense_ids(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return NULL;
    Py_buffer rows, values, out;
    if (PyObject_GetBuffer(objs[0], &rows, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t m = rows.len / 4;
    if (get_buffer(objs[1], &values, m, 8, 0, "values") < 0) {
        PyBuffer_Release(&rows);
        return NULL;
    }
    if (PyObject_GetBuffer(objs[2], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&rows);
        PyBuffer_Release(&values);
        return NULL;
    }
    const int32_t *r = rows.buf;
    const int64_t *v = values.buf;
    int32_t *o = out.buf;
    Py_ssize_t n = out.len / 4, k = 0;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (k < m && r[k] == i) {
            int64_t x = v[k++];
            if (x < INT32_MIN || x > INT32_MAX || (k < m && r[k] <= i)) {
                ok = 0;
                break;
            }
            o[i] = (int32_t)x;
        } else {
            o[i] = -1;
        }
    }
    ok = ok && k == m; /* every row was reached: none out of order, none past the events */
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&rows);
    PyBuffer_Release(&values);
    PyBuffer_Release(&out);
    return PyBool_FromLong(ok);
}

static PyObject *relative_us(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ts_obj, *out_obj;
    long long origin;
    if (!PyArg_ParseTuple(args, "OLO", &ts_obj, &origin, &out_obj))
        return NULL;
    Py_buffer ts, out;
    if (PyObject_GetBuffer(ts_obj, &ts, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = ts.len / 8;
    if (get_buffer(out_obj, &out, n, 8, 1, "out") < 0) {
        PyBuffer_Release(&ts);
        return NULL;
    }
    const int64_t *t = ts.buf;
    double *o = out.buf;
    uint64_t o_ns = (uint64_t)origin;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = t[i];
        o[i] = x == INT_MISSING ? NAN : (double)(int64_t)((uint64_t)x - o_ns) / 1000.0;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ts);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyObject *present_ids(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[2];
    if (!PyArg_ParseTuple(args, "OO", &objs[0], &objs[1]))
        return NULL;
    Py_buffer ids, out;
    if (PyObject_GetBuffer(objs[0], &ids, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = ids.len / 8;
    if (get_buffer(objs[1], &out, n, 4, 1, "out") < 0) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    /* through char pointers and memcpy: ``out`` may share ``ids``'s memory (see the header) */
    const char *v = ids.buf;
    char *o = out.buf;
    int fits = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        int64_t x;
        int32_t y;
        memcpy(&x, v + 8 * i, 8);
        if (x == INT_MISSING) {
            y = -1;
        } else if (x < INT32_MIN || x > INT32_MAX) {
            fits = 0;
            break;
        } else {
            y = (int32_t)x;
        }
        memcpy(o + 4 * i, &y, 4);
    }
    if (!fits && (const char *)o == v) /* in place: the ids before i back from their int32 values, */
        for (Py_ssize_t j = i - 1; j >= 0; j--) { /* last first (element j's bytes hold outs 2j, 2j + 1) */
            int32_t y;
            memcpy(&y, o + 4 * j, 4);
            int64_t x = y == -1 ? INT_MISSING : y;
            memcpy(o + 8 * j, &x, 8);
        }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyBuffer_Release(&out);
    return PyBool_FromLong(fits);
}

static PyMethodDef decode_methods[] = {
    {"earliest_starts", earliest_starts, METH_VARARGS,
     "earliest_starts(ph, ts, x_code) -> (complete, any)\n\n"
     "The smallest int64 ts (INT64_MIN: missing, skipped) of the events whose int32 ph is\n"
     "x_code, and of all events; None where there is none."},
    {"times_plausible", times_plausible, METH_VARARGS,
     "times_plausible(ph, ts, dur, x_code, m_code, max_dur_us, max_spread_ns) -> bool\n\n"
     "True when sanitize.drop_absurd would drop no event of these columns (int32 phase codes,\n"
     "int64 ns starts, float64 durations); False: let it look."},
    {"first_of_groups", first_of_groups, METH_VARARGS,
     "first_of_groups(group, rows, ts) -> None\n\n"
     "For the rows (bool) with group[i] >= 0 (int64, in place), set group[group[i]] to the\n"
     "group's row of the earliest ts (float64; NaN last, then file order); those entries must\n"
     "be -1 before (see columns.link_first_gpu_events)."},
    {"step_name_table", step_name_table, METH_O,
     "step_name_table(strings) -> bytearray\n\n"
     "model.step_name_table(strings) as int64 bytes, -2 for a text the reference must read (not\n"
     "ASCII and starting with 'ProfilerStep', or not a str)."},
    {"split_by_side", split_by_side, METH_VARARGS,
     "split_by_side(rows, ids, gpu_side, cpu_side, gpu_rows, gpu_ids, cpu_rows, cpu_ids) -> (n_gpu, n_cpu)\n\n"
     "Of the rows (int32) and ids (int64 >= 0), those on a GPU-side and on a CPU-side event (bool\n"
     "per event), into the four outputs (int32 rows, int64 ids); their counts."},
    {"dense_ids", dense_ids, METH_VARARGS,
     "dense_ids(rows, values, out) -> bool\n\n"
     "out (int32) = -1, then values (int64) at rows (int32, strictly ascending), in one pass;\n"
     "False (out unfinished) where a value does not fit int32 or the rows are not so."},
    {"relative_us", relative_us, METH_VARARGS,
     "relative_us(ts, origin_ns, out) -> None\n\n"
     "out[i] = (ts[i] - origin_ns) / 1000.0 (int64 ns, exact difference, into float64 us), NaN\n"
     "where ts[i] is INT64_MIN (missing); out may share ts's memory."},
    {"present_ids", present_ids, METH_VARARGS,
     "present_ids(ids, out) -> bool\n\n"
     "out[i] = ids[i] (int64 into int32), -1 where ids[i] is INT64_MIN (missing); False, out\n"
     "unfinished, when a present id does not fit in int32. out may be the first half of ids's\n"
     "memory (then ids is as it was when False is returned, -1 read as missing)."},
    {"step_numbers", step_numbers, METH_VARARGS,
     "step_numbers(starts, ends, numbers, ts, skip, out) -> None\n\n"
     "Write into out (int64) the number of the step each event starts in: the last of the\n"
     "ascending, finite starts (float64) at or before ts (float64), where ts < its end; -1\n"
     "outside any step, where ts is NaN and where skip (bool) is set (see columns._iterations)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef decode_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_decode",
    .m_doc = "One-pass loops of the loader's decode (see perfreport.load.columns for the reference).",
    .m_size = -1,
    .m_methods = decode_methods,
};

PyMODINIT_FUNC PyInit__decode(void)
{
    PyObject *m = PyModule_Create(&decode_module);
    if (m && (PyModule_AddIntConstant(m, "GROUPS_INT32", 1) < 0 || /* first_of_groups takes int32 groups */
              PyModule_AddIntConstant(m, "STEPS_INT32", 1) < 0 ||   /* step_numbers writes an int32 out */
              PyModule_AddIntConstant(m, "IDS_IN_PLACE", 1) < 0)) { /* present_ids may write over its ids */
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
