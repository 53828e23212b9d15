/* Grouped sums of float64 rows as pandas' compensated loop makes them, in one pass.
 *
 *     kahan_sums(group, values, out) -> None
 *
 * ``group`` (int64, one per row, each in [0, len(out))), ``values`` (float64, one per row),
 * ``out`` (float64, one per group, zeroed by the caller): each group's rows added in row order
 * by pandas' ``group_sum`` (``pandas/_libs/groupby.pyx``, skipna): NaN rows skipped, then
 *
 *     y = val - comp[g];  t = out[g] + y;  comp[g] = t - out[g] - y;  if comp[g] is NaN: comp[g] = 0;
 *     out[g] = t
 *
 * from out = comp = 0 (the reset: an infinite value would make every later sum NaN). The
 * same IEEE additions in the same order give pandas' sums to the last bit (x86-64 uses SSE2
 * doubles; nothing here is contracted into a fused multiply-add). Why: a rank's parts are
 * summed per (step, key) after every layer's parts were made, rows not in group order, and
 * the numpy path (group sizes, first rows by ``np.minimum.at``, the groups of three rows or
 * more handed to pandas) took 0.09-0.13 s of each digest of HTA's trace_compare tiny grown to
 * 1 GB. ValueError for a group out of bounds or lengths that differ.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int open_buffer(PyObject *obj, Py_buffer *view, char kind, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    const char *f = view->format;
    if (f[0] == '=' || f[0] == '@')
        f++;
    int ok = view->itemsize == 8 && f[1] == '\0'
             && (kind == 'f' ? f[0] == 'd' : (f[0] == 'l' || f[0] == 'q'));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous %s array", what, kind == 'f' ? "float64" : "int64");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *kahan_sums(PyObject *self, PyObject *args)
{
    PyObject *objs[3];
    Py_buffer g, v, o;
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return NULL;
    if (open_buffer(objs[0], &g, 'i', 0, "group") < 0)
        return NULL;
    if (open_buffer(objs[1], &v, 'f', 0, "values") < 0) {
        PyBuffer_Release(&g);
        return NULL;
    }
    if (open_buffer(objs[2], &o, 'f', 1, "out") < 0) {
        PyBuffer_Release(&g);
        PyBuffer_Release(&v);
        return NULL;
    }
    Py_ssize_t n = g.len / 8, m = o.len / 8;
    const int64_t *group = (const int64_t *)g.buf;
    const double *values = (const double *)v.buf;
    double *out = (double *)o.buf;
    PyObject *result = NULL;
    double *comp = NULL;
    if (v.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "group and values differ in length");
        goto done;
    }
    comp = (double *)calloc(m ? (size_t)m : 1, sizeof(double));
    if (comp == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t k = group[i];
        if (k < 0 || k >= m) {
            bad = 1;
            break;
        }
        double val = values[i];
        if (val != val) /* NaN: skipped */
            continue;
        double y = val - comp[k];
        double t = out[k] + y;
        comp[k] = t - out[k] - y;
        if (comp[k] != comp[k])
            comp[k] = 0.0;
        out[k] = t;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "a group is out of bounds");
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    free(comp);
    PyBuffer_Release(&g);
    PyBuffer_Release(&v);
    PyBuffer_Release(&o);
    return result;
}

static PyMethodDef groupsum_methods[] = {
    {"kahan_sums", kahan_sums, METH_VARARGS,
     "kahan_sums(group, values, out) -> None\n\n"
     "Add each float64 row into out[group] by pandas' compensated loop, in row order, NaN skipped\n"
     "(see grouping._pandas_sums)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef groupsum_module = {PyModuleDef_HEAD_INIT, "_groupsum", NULL, -1, groupsum_methods};

PyMODINIT_FUNC PyInit__groupsum(void) { return PyModule_Create(&groupsum_module); }
