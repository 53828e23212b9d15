/*
 * _sorted.c - np.searchsorted for keys that come nearly in order, np.isin for a few values, a
 * table's entries taken by int32 code, the ranks of sorted values and the distinct codes of a
 * column.
 *
 * numpy's searchsorted bisects the whole array for every key (it only keeps the lower bound
 * when the keys ascend), ~17 steps into 173,000 windows for each of millions of intervals
 * whose starts mostly ascend. Here each search starts at the previous key's answer and
 * gallops (steps of 1, 2, 4, ...) towards the new one before bisecting: O(log distance) per
 * key, so a key close to the previous answer costs a step or two, and keys in any order still
 * get numpy's answers. Python calls
 *
 *     search(a, v, right, out) -> None
 *
 * with ``a`` sorted (as numpy sorts: NaN last), ``a`` and ``v`` both float64 or both integers
 * (int32 or int64, either width each: compared as int64, as numpy casts them), ``right`` the
 * side, and ``out`` (int64, len(v)) written with np.searchsorted(a, v, side)'s answers.
 * Floats compare as numpy's sort does: NaN above every number, equal to NaN.
 *
 *     among(values, few, out) -> int
 *
 * ``np.flatnonzero(np.isin(values, few))`` for a short ``few``: the positions (ascending) of
 * the values equal to one of them, written to ``out`` (int64, room for len(values)), their
 * count returned. ``few`` is sorted and distinct: float64 without NaN for float64 values, int64
 * for integer values (int32 or int64). Each value is first tested against a bitmap of the few
 * values' hashes (32 KB: the first-level cache), so the millions that are none of them cost a
 * multiply and a bit test (1,100 of 5 M values: ~0.3 % pass by chance at 2**18 bits, 1.7 % at
 * 2**16, which took 6.4 ms instead of 5.0); the others a binary search among the few. NaN is none of them and
 * -0.0 is 0.0, as in np.isin. numpy sorts the values with the few (np.isin) or searches each
 * among them: a pass over the 5 M starts of a 1 GB rank for a thousand orphan kernels, ~10
 * ms either way against ~5 here.
 *
 *     take_codes(table, codes, out) -> None
 *
 * ``table.take(codes)`` for int32 string codes into a table of a bool or an int32 per code (a
 * code -1, no string, reads its last entry, as numpy's negative index), written into ``out`` (as
 * wide as the table's entries; it may be ``codes`` itself: each code is read before its entry is
 * written). Which events have one of some names or categories (model.code_mask), the pid and tid
 * codes of every event (columns.build_rank_trace). numpy first copies the int32 codes into a
 * column of intp indices, then gathers: a bool per code for the 4.49 M events of the triton
 * example grown to 1 GB 5.0-5.5 ms warm (the decode's mask of its GPU-side categories 7 ms, the
 * copy's fresh pages among them), here 2.4; int32 for the 1 M events of the V100-grown 200 MB
 * rank 4.5-5.6 ms, here 2.0.
 * IndexError for a code out of bounds.
 *
 *     rank_sorted(values, order, bounds, position) -> int
 *
 * For float64 ``values`` and their ascending order (``np.argsort(values, kind="stable")``, int64):
 * the distinct values in order into the head of ``bounds`` (float64, room for all) and each
 * value's rank among them into ``position`` (int64, one per value); returns how many are
 * distinct. Equal is ``==`` as numpy's ``not_equal`` says: -0.0 equals 0.0, each NaN stands
 * alone (the first of a run is kept, as ``ordered[new]`` keeps it). What
 * ``analyses.intervals.sorted_edges`` did with a gather, a mask, a cumsum and a scatter of
 * four arrays as long as the values, in one pass over the order: the 5.2 M edges of the time
 * at stake of HTA's trace_compare tiny grown to 1 GB took 33 ms warm and 79 ms on fresh pages
 * after the sort. Its digests (a compare worker's, in one process) 2.43-2.60 -> 2.48-2.57 s,
 * faster in 6 of 7 alternating pairs (medians 2.55 -> 2.50); the triton example's 1.54-1.58 ->
 * 1.50-1.55 s (3 of 3); their peaks unchanged.
 *
 *     rank_codes(codes, rank, uniq, inverse) -> int
 *
 * ``np.unique(codes, return_inverse=True)`` for int32 or int64 codes in [-1, n) (string codes,
 * -1 for none), ``model.distinct_codes``' presence table: ``rank`` (int64, n + 1 zeros) marks
 * each code's slot (-1's is the last), the marked slots are numbered (-1 first, then the codes
 * ascending) and those codes written to the head of ``uniq`` (int64, n + 1), each code's
 * number to ``inverse`` (int64, one per code); returns how many are distinct. IndexError for a
 * code out of [-1, n). numpy first copied int32 codes into intp indices, then scattered and
 * gathered through them: 70 calls of one digest of HTA's trace_compare tiny grown to 1 GB (63 M
 * codes) 0.27-0.28 s, here 0.16-0.20 s.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* numpy's order of floats: a < b, NaN after every number (npysort's Tag::less). */
#define LESS_F(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define LESS_I(a, b) ((a) < (b))

/* pred(i): a[i] lies before v's answer (left: a[i] < v; right: not v < a[i]); true for a prefix.
 * TA, TV: the element types of a and v (integers of either width compare as int64). */
#define DEFINE_SEARCH(NAME, TA, TV, TK, LESS)                                                           \
static void NAME(const TA *a, Py_ssize_t n, const TV *v, Py_ssize_t m, int right, int64_t *out)       \
{                                                                                                     \
    Py_ssize_t pos = 0;                                                                               \
    for (Py_ssize_t k = 0; k < m; k++) {                                                              \
        const TK key = (TK)v[k];                                                                      \
        Py_ssize_t lo, hi;                                                                            \
        if (pos < n && (right ? !LESS(key, (TK)a[pos]) : LESS((TK)a[pos], key))) {                    \
            /* the answer is after pos: gallop up */                                                  \
            Py_ssize_t step = 1, bound = pos + 1;                                                     \
            lo = pos + 1;                                                                             \
            while (bound < n && (right ? !LESS(key, (TK)a[bound]) : LESS((TK)a[bound], key))) {       \
                lo = bound + 1;                                                                       \
                bound = lo + step;                                                                    \
                step <<= 1;                                                                           \
            }                                                                                         \
            hi = bound < n ? bound : n;                                                               \
        } else {                                                                                      \
            /* the answer is at or before pos: gallop down */                                         \
            Py_ssize_t step = 1, bound = pos - 1;                                                     \
            hi = pos;                                                                                 \
            while (bound >= 0 && !(right ? !LESS(key, (TK)a[bound]) : LESS((TK)a[bound], key))) {     \
                hi = bound;                                                                           \
                bound = hi - 1 - step;                                                                \
                step <<= 1;                                                                           \
            }                                                                                         \
            lo = bound + 1 > 0 ? bound + 1 : 0;                                                       \
        }                                                                                             \
        while (lo < hi) {                                                                             \
            Py_ssize_t mid = lo + (hi - lo) / 2;                                                      \
            if (right ? !LESS(key, (TK)a[mid]) : LESS((TK)a[mid], key))                               \
                lo = mid + 1;                                                                         \
            else                                                                                      \
                hi = mid;                                                                             \
        }                                                                                             \
        out[k] = pos = lo;                                                                            \
    }                                                                                                 \
}

DEFINE_SEARCH(search_f64, double, double, double, LESS_F)
DEFINE_SEARCH(search_i64_i64, int64_t, int64_t, int64_t, LESS_I)
DEFINE_SEARCH(search_i32_i64, int32_t, int64_t, int64_t, LESS_I)
DEFINE_SEARCH(search_i64_i32, int64_t, int32_t, int64_t, LESS_I)
DEFINE_SEARCH(search_i32_i32, int32_t, int32_t, int64_t, LESS_I)

#define AMONG_BITS 18 /* 2**18 bits of hashes: 32 KB, a first-level data cache */

static inline uint64_t among_hash(uint64_t bits) { return (bits * 0x9E3779B97F4A7C15ull) >> (64 - AMONG_BITS); }

static inline uint64_t float_bits(double x)
{
    uint64_t bits;
    x = x == 0.0 ? 0.0 : x; /* -0.0 is 0.0 */
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

static void among_bitmap(uint64_t *bitmap, const void *few, Py_ssize_t m, int floats)
{
    memset(bitmap, 0, sizeof(uint64_t) << (AMONG_BITS - 6));
    for (Py_ssize_t k = 0; k < m; k++) {
        uint64_t h = among_hash(floats ? float_bits(((const double *)few)[k]) : (uint64_t)((const int64_t *)few)[k]);
        bitmap[h >> 6] |= 1ull << (h & 63);
    }
}

/* Whether key is one of the m ascending ``few``. */
#define DEFINE_FOUND(NAME, T)                                   \
static inline int NAME(const T *few, Py_ssize_t m, T key)       \
{                                                               \
    Py_ssize_t lo = 0, hi = m;                                  \
    while (lo < hi) {                                           \
        Py_ssize_t mid = lo + (hi - lo) / 2;                    \
        if (few[mid] < key)                                     \
            lo = mid + 1;                                       \
        else                                                    \
            hi = mid;                                           \
    }                                                           \
    return lo < m && few[lo] == key;                            \
}
DEFINE_FOUND(found_f64, double)
DEFINE_FOUND(found_i64, int64_t)

#define DEFINE_AMONG(NAME, TV, TK, BITS, FOUND)                                                              \
static Py_ssize_t NAME(const TV *v, Py_ssize_t n, const TK *few, Py_ssize_t m, const uint64_t *bitmap, int64_t *out) \
{                                                                                                         \
    Py_ssize_t count = 0;                                                                                 \
    for (Py_ssize_t i = 0; i < n; i++) {                                                                  \
        uint64_t h = among_hash(BITS((TK)v[i]));                                                          \
        if ((bitmap[h >> 6] >> (h & 63)) & 1 && FOUND(few, m, (TK)v[i]))                                  \
            out[count++] = i;                                                                             \
    }                                                                                                     \
    return count;                                                                                         \
}
#define INT_BITS(x) ((uint64_t)(x))
DEFINE_AMONG(among_f64, double, double, float_bits, found_f64)
DEFINE_AMONG(among_i64, int64_t, int64_t, INT_BITS, found_i64)
DEFINE_AMONG(among_i32, int32_t, int64_t, INT_BITS, found_i64)

/* The element kind of a buffer: 'f' float64, '4' int32, '8' int64, 0 anything else. */
static char kind_of(const Py_buffer *view)
{
    const char *f = view->format;
    if (f[0] == '=' || f[0] == '@')  /* native order, said explicitly */
        f++;
    if (f[1] != '\0')
        return 0;
    if (f[0] == 'd' && view->itemsize == 8)
        return 'f';
    if ((f[0] == 'i' || f[0] == 'l' || f[0] == 'q') && view->itemsize == 4)
        return '4';
    if ((f[0] == 'l' || f[0] == 'q') && view->itemsize == 8)
        return '8';
    return 0;
}

static void release(Py_buffer *views, int n)
{
    for (int k = 0; k < n; k++)
        PyBuffer_Release(&views[k]);
}

/* The buffers of two inputs and a writable output (each with its format); -1 on failure, none held. */
static int open_views(PyObject *objs[3], Py_buffer views[3])
{
    static const int flags[3] = {PyBUF_C_CONTIGUOUS | PyBUF_FORMAT, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT,
                                 PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT};
    for (int k = 0; k < 3; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], flags[k]) < 0) {
            release(views, k);
            return -1;
        }
    }
    return 0;
}

/* Release the ``n`` views and raise ValueError(message): an argument refused. */
static PyObject *refuse(Py_buffer *views, int n, const char *message)
{
    release(views, n);
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

/* The buffers of a call f(a, b, out) (see open_views); -1 on failure, none held. */
static int open_three(PyObject *args, Py_buffer views[3])
{
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return -1;
    return open_views(objs, views);
}

/* The buffers of a call f(a, b, c, d) (each with its format), those from ``writable_from`` on
 * writable; -1 on failure, none held. */
static int open_four(PyObject *args, Py_buffer views[4], int writable_from)
{
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3]))
        return -1;
    for (int k = 0; k < 4; k++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (k >= writable_from ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[k], &views[k], flags) < 0) {
            release(views, k);
            return -1;
        }
    }
    return 0;
}

/* Release the ``n`` views, then the count, or IndexError(message) where ``bad`` >= 0: the end of
 * a pass that counts what it wrote and stops at an index out of bounds. */
static PyObject *counted(Py_buffer *views, int n, Py_ssize_t bad, const char *message, Py_ssize_t count)
{
    release(views, n);
    if (bad >= 0) {
        PyErr_SetString(PyExc_IndexError, message);
        return NULL;
    }
    return PyLong_FromSsize_t(count);
}

static PyObject *search(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[3];
    int right;
    PyObject *out_obj;
    if (!PyArg_ParseTuple(args, "OOpO", &objs[0], &objs[1], &right, &out_obj))
        return NULL;
    objs[2] = out_obj;
    Py_buffer views[3];
    if (open_views(objs, views) < 0)
        return NULL;
    char ka = kind_of(&views[0]), kv = kind_of(&views[1]), ko = kind_of(&views[2]);
    int ok = ka && kv && (ka == 'f') == (kv == 'f') && ko == '8' && views[2].len / 8 == views[1].len / views[1].itemsize;
    if (!ok)
        return refuse(views, 3, "search: expected a and v both float64 or both int32/int64, and an int64 "
                                "out as long as v");
    Py_ssize_t n = views[0].len / views[0].itemsize, m = views[1].len / views[1].itemsize;
    const void *a = views[0].buf, *v = views[1].buf;
    int64_t *out = views[2].buf;
    Py_BEGIN_ALLOW_THREADS
    if (ka == 'f')
        search_f64(a, n, v, m, right, out);
    else if (ka == '8' && kv == '8')
        search_i64_i64(a, n, v, m, right, out);
    else if (ka == '4' && kv == '8')
        search_i32_i64(a, n, v, m, right, out);
    else if (ka == '8' && kv == '4')
        search_i64_i32(a, n, v, m, right, out);
    else
        search_i32_i32(a, n, v, m, right, out);
    Py_END_ALLOW_THREADS
    release(views, 3);
    Py_RETURN_NONE;
}

static PyObject *among(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer views[3];
    if (open_three(args, views) < 0)
        return NULL;
    char kv = kind_of(&views[0]), kf = kind_of(&views[1]), ko = kind_of(&views[2]);
    int ok = kv && (kv == 'f' ? kf == 'f' : kf == '8') && ko == '8' && views[2].len / 8 >= views[0].len / views[0].itemsize;
    if (!ok)
        return refuse(views, 3, "among: expected float64 values with float64 few, or int32/int64 values with "
                                "int64 few, and an int64 out at least as long as values");
    uint64_t *bitmap = PyMem_Malloc(sizeof(uint64_t) << (AMONG_BITS - 6));
    if (!bitmap) {
        release(views, 3);
        return PyErr_NoMemory();
    }
    Py_ssize_t n = views[0].len / views[0].itemsize, m = views[1].len / 8, count;
    const void *v = views[0].buf, *few = views[1].buf;
    int64_t *out = views[2].buf;
    Py_BEGIN_ALLOW_THREADS
    among_bitmap(bitmap, few, m, kv == 'f');
    if (kv == 'f')
        count = among_f64(v, n, few, m, bitmap, out);
    else if (kv == '8')
        count = among_i64(v, n, few, m, bitmap, out);
    else
        count = among_i32(v, n, few, m, bitmap, out);
    Py_END_ALLOW_THREADS
    PyMem_Free(bitmap);
    release(views, 3);
    return PyLong_FromSsize_t(count);
}

/* out[i] = table[codes[i]] for entries of one width (TYPE); the first code out of bounds, -1 if none. */
#define TAKE_CODES(TYPE)                                                                            \
    do {                                                                                            \
        const TYPE *t = table;                                                                      \
        TYPE *o = out;                                                                              \
        for (Py_ssize_t i = 0; i < n; i++) {                                                        \
            Py_ssize_t k = codes[i] < 0 ? (Py_ssize_t)codes[i] + m : (Py_ssize_t)codes[i];          \
            if ((size_t)k >= (size_t)m) {                                                           \
                bad = i;                                                                            \
                break;                                                                              \
            }                                                                                       \
            o[i] = t[k];                                                                            \
        }                                                                                           \
    } while (0)

static PyObject *take_codes(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer views[3];
    if (open_three(args, views) < 0)
        return NULL;
    Py_ssize_t width = views[0].itemsize, m = views[0].len / width, n = views[1].len / 4;
    if ((width != 1 && width != 4) || kind_of(&views[1]) != '4' || views[2].itemsize != width ||
        views[2].len != n * width)
        return refuse(views, 3, "take_codes: expected a table of 1- or 4-byte entries, int32 codes and "
                                "an out of the table's entries, as long as the codes");
    const void *table = views[0].buf;
    const int32_t *codes = views[1].buf;
    void *out = views[2].buf;
    Py_ssize_t bad = -1;
    int32_t bad_code = 0;
    Py_BEGIN_ALLOW_THREADS
    if (width == 1)
        TAKE_CODES(uint8_t);
    else
        TAKE_CODES(int32_t);
    if (bad >= 0)
        bad_code = codes[bad]; /* read before out (maybe the codes' own memory) is released */
    Py_END_ALLOW_THREADS
    if (bad >= 0)
        PyErr_Format(PyExc_IndexError, "take_codes: code %d out of bounds for a table of %zd", (int)bad_code, m);
    release(views, 3);
    return bad >= 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *rank_sorted(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer views[4];
    if (open_four(args, views, 2) < 0)  /* values, order, bounds and position (written) */
        return NULL;
    Py_ssize_t n = views[0].len / 8;
    int ok = kind_of(&views[0]) == 'f' && kind_of(&views[1]) == '8' && kind_of(&views[2]) == 'f'
             && kind_of(&views[3]) == '8' && views[1].len == n * 8 && views[2].len >= n * 8 && views[3].len == n * 8;
    if (!ok)
        return refuse(views, 4, "rank_sorted: expected float64 values, their int64 order, a float64 bounds "
                                "at least as long and an int64 position as long");
    const double *values = views[0].buf;
    const int64_t *order = views[1].buf;
    double *bounds = views[2].buf;
    int64_t *position = views[3].buf;
    Py_ssize_t distinct = 0, bad = -1;
    Py_BEGIN_ALLOW_THREADS
    double last = 0.0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= n) {
            bad = k;
            break;
        }
        double v = values[i];
        if (k == 0 || v != last)  /* (NaN != NaN: each NaN a bound of its own, as numpy's not_equal says) */
            bounds[distinct++] = v;
        last = v;
        position[i] = distinct - 1;
    }
    Py_END_ALLOW_THREADS
    return counted(views, 4, bad, "rank_sorted: an order entry out of bounds", distinct);
}

/* The ranks of integer codes in [-1, n) among the distinct ones (see distinct_codes' doc): mark
 * each code's slot in ``rank`` (int64, n + 1 zeros; code -1 is the last slot), number the
 * marked slots (-1's first, then the codes ascending), write those distinct codes to ``uniq``
 * and each code's rank to ``inverse``. The first code out of [-1, n) stops it; -1 if none. */
#define RANK_CODES(TYPE)                                                                            \
    do {                                                                                            \
        const TYPE *c = codes;                                                                      \
        for (Py_ssize_t i = 0; i < m; i++) {                                                        \
            int64_t k = (int64_t)c[i];                                                              \
            if (k < -1 || k >= (int64_t)n) {                                                        \
                bad = i;                                                                            \
                break;                                                                              \
            }                                                                                       \
            rank[k < 0 ? n : k] = 1;                                                                \
        }                                                                                           \
        if (bad >= 0)                                                                               \
            break;                                                                                  \
        if (rank[n]) {                                                                              \
            uniq[count] = -1;                                                                       \
            rank[n] = count++;                                                                      \
        }                                                                                           \
        for (Py_ssize_t k = 0; k < n; k++)                                                          \
            if (rank[k]) {                                                                          \
                uniq[count] = k;                                                                    \
                rank[k] = count++;                                                                  \
            }                                                                                       \
        for (Py_ssize_t i = 0; i < m; i++)                                                          \
            inverse[i] = rank[c[i] < 0 ? n : (Py_ssize_t)c[i]];                                     \
    } while (0)

static PyObject *rank_codes(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer views[4];
    if (open_four(args, views, 1) < 0)  /* codes, then rank, uniq and inverse (written) */
        return NULL;
    char kc = kind_of(&views[0]);
    Py_ssize_t m = kc ? views[0].len / views[0].itemsize : 0, n = views[1].len / 8 - 1;
    int ok = (kc == '4' || kc == '8') && kind_of(&views[1]) == '8' && n >= 0 && kind_of(&views[2]) == '8'
             && views[2].len == (n + 1) * 8 && kind_of(&views[3]) == '8' && views[3].len == m * 8;
    if (!ok)
        return refuse(views, 4, "rank_codes: expected int32/int64 codes, an int64 rank of n + 1 zeros, an int64 "
                                "uniq as long and an int64 inverse as long as the codes");
    const void *codes = views[0].buf;
    int64_t *rank = views[1].buf, *uniq = views[2].buf, *inverse = views[3].buf;
    Py_ssize_t count = 0, bad = -1;
    Py_BEGIN_ALLOW_THREADS
    do {
        if (kc == '4')
            RANK_CODES(int32_t);
        else
            RANK_CODES(int64_t);
    } while (0);
    Py_END_ALLOW_THREADS
    return counted(views, 4, bad, "rank_codes: a code out of [-1, n)", count);
}

static PyMethodDef methods[] = {
    {"search", search, METH_VARARGS,
     "search(a, v, right, out) -> None\n\nWrite np.searchsorted(a, v, 'right' if right else 'left') into out\n"
     "(int64), galloping from each key's answer to the next's (see the module doc)."},
    {"among", among, METH_VARARGS,
     "among(values, few, out) -> int\n\nWrite the positions of the values equal to one of the sorted, distinct few\n"
     "into out (int64) and return their count: np.flatnonzero(np.isin(values, few)) (see the module doc)."},
    {"take_codes", take_codes, METH_VARARGS,
     "take_codes(table, codes, out) -> None\n\nWrite table.take(codes) into out: int32 codes into a table of 1- or 4-byte\n"
     "entries (a negative code counts from the table's end); IndexError for one out of bounds (see the module doc)."},
    {"rank_sorted", rank_sorted, METH_VARARGS,
     "rank_sorted(values, order, bounds, position) -> int\n\nThe distinct float64 values in order into bounds and each\n"
     "value's rank among them into position, from the values' ascending order; returns the count (see the module doc)."},
    {"rank_codes", rank_codes, METH_VARARGS,
     "rank_codes(codes, rank, uniq, inverse) -> int\n\nnp.unique(codes, return_inverse=True) for int32/int64 codes in [-1, n):\n"
     "the distinct codes into uniq, each code's position among them into inverse; returns their count."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sorted", "np.searchsorted for keys nearly in order; np.isin for a few values; a table taken by int32 code; "
                                   "the ranks of sorted values; the distinct codes of a column.", -1,
                                   methods};

PyMODINIT_FUNC PyInit__sorted(void) { return PyModule_Create(&module); }
