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
 * with ``a`` sorted (float64 or int64, as numpy sorts: NaN last), ``v`` of a's dtype, ``right``
 * the side, and ``out`` (int64, len(v)) written with np.searchsorted(a, v, side)'s answers.
 * Floats compare as numpy's sort does: NaN above every number, equal to NaN.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* numpy's order of floats: a < b, NaN after every number (npysort's Tag::less). */
#define LESS_F(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define LESS_I(a, b) ((a) < (b))

/* pred(i): a[i] lies before v's answer (left: a[i] < v; right: not v < a[i]); true for a prefix. */
#define DEFINE_SEARCH(NAME, T, LESS)                                                                   \
static void NAME(const T *a, Py_ssize_t n, const T *v, Py_ssize_t m, int right, int64_t *out)         \
{                                                                                                     \
    Py_ssize_t pos = 0;                                                                               \
    for (Py_ssize_t k = 0; k < m; k++) {                                                              \
        const T key = v[k];                                                                           \
        Py_ssize_t lo, hi;                                                                            \
        if (pos < n && (right ? !LESS(key, a[pos]) : LESS(a[pos], key))) {                            \
            /* the answer is after pos: gallop up */                                                  \
            Py_ssize_t step = 1, bound = pos + 1;                                                     \
            lo = pos + 1;                                                                             \
            while (bound < n && (right ? !LESS(key, a[bound]) : LESS(a[bound], key))) {               \
                lo = bound + 1;                                                                       \
                bound = lo + step;                                                                    \
                step <<= 1;                                                                           \
            }                                                                                         \
            hi = bound < n ? bound : n;                                                               \
        } else {                                                                                      \
            /* the answer is at or before pos: gallop down */                                         \
            Py_ssize_t step = 1, bound = pos - 1;                                                     \
            hi = pos;                                                                                 \
            while (bound >= 0 && !(right ? !LESS(key, a[bound]) : LESS(a[bound], key))) {             \
                hi = bound;                                                                           \
                bound = hi - 1 - step;                                                                \
                step <<= 1;                                                                           \
            }                                                                                         \
            lo = bound + 1 > 0 ? bound + 1 : 0;                                                       \
        }                                                                                             \
        while (lo < hi) {                                                                             \
            Py_ssize_t mid = lo + (hi - lo) / 2;                                                      \
            if (right ? !LESS(key, a[mid]) : LESS(a[mid], key))                                       \
                lo = mid + 1;                                                                         \
            else                                                                                      \
                hi = mid;                                                                             \
        }                                                                                             \
        out[k] = pos = lo;                                                                            \
    }                                                                                                 \
}

DEFINE_SEARCH(search_f64, double, LESS_F)
DEFINE_SEARCH(search_i64, int64_t, LESS_I)

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
    const char *fa = views[0].format, *fv = views[1].format, *fo = views[2].format;
    int is_f = strcmp(fa, "d") == 0 && strcmp(fv, "d") == 0;
    int is_i = (strcmp(fa, "l") == 0 || strcmp(fa, "q") == 0) && (strcmp(fv, "l") == 0 || strcmp(fv, "q") == 0);
    int out_ok = (strcmp(fo, "l") == 0 || strcmp(fo, "q") == 0) && views[2].len == views[1].len;
    if (!(is_f || is_i) || !out_ok || views[0].itemsize != 8 || views[1].itemsize != 8) {
        release(views, 3);
        PyErr_SetString(PyExc_ValueError, "search: expected a and v both float64 or both int64, and an int64 out "
                                          "as long as v");
        return NULL;
    }
    Py_ssize_t n = views[0].len / 8, m = views[1].len / 8;
    Py_BEGIN_ALLOW_THREADS
    if (is_f)
        search_f64(views[0].buf, n, views[1].buf, m, right, views[2].buf);
    else
        search_i64(views[0].buf, n, views[1].buf, m, right, views[2].buf);
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
