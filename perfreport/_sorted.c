/*
 * _sorted.c - np.searchsorted for keys that come nearly in order.
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
    int flags[3] = {PyBUF_C_CONTIGUOUS | PyBUF_FORMAT, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT,
                    PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT};
    for (int k = 0; k < 3; k++) {
        if (PyObject_GetBuffer(objs[k], &views[k], flags[k]) < 0) {
            release(views, k);
            return NULL;
        }
    }
    char ka = kind_of(&views[0]), kv = kind_of(&views[1]), ko = kind_of(&views[2]);
    int ok = ka && kv && (ka == 'f') == (kv == 'f') && ko == '8' && views[2].len / 8 == views[1].len / views[1].itemsize;
    if (!ok) {
        release(views, 3);
        PyErr_SetString(PyExc_ValueError, "search: expected a and v both float64 or both int32/int64, and an int64 "
                                          "out as long as v");
        return NULL;
    }
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

static PyMethodDef methods[] = {
    {"search", search, METH_VARARGS,
     "search(a, v, right, out) -> None\n\nWrite np.searchsorted(a, v, 'right' if right else 'left') into out\n"
     "(int64), galloping from each key's answer to the next's (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sorted", "np.searchsorted for keys nearly in order.", -1,
                                   methods};

PyMODINIT_FUNC PyInit__sorted(void) { return PyModule_Create(&module); }
