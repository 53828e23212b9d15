/*
 * _nest.c - the call-stack sweep of callstack.py in one linear pass.
 *
 * ``callstack.nest`` recovers the nesting of CPU events from their spans: the 2n sweep points
 * (the open and the close of every event) are put in order, then a stack of open events is
 * swept over them. The pure-numpy path (``sweep_order`` + ``parents_from_sweep``) does both
 * with whole-array operations; it is the reference, and this module must give the very same
 * parents and depths. Python still sorts the points by (thread, time) with ``np.lexsort``;
 * this module then does, in one pass over that order,
 *
 *  - the tie rules within each instant (points of one thread at one time), with the keys of
 *    ``_instant_order_keys`` (class, sub1, sub2) and a stable sort, exactly as
 *    ``_order_within_instants`` orders them; and
 *  - the sweep itself: an open records the current stack height as the event's depth and the
 *    top of the stack as its parent, then pushes the event; a close pops the newest open event
 *    (whichever it is, as the numpy path's level arithmetic does).
 *
 * Python calls
 *
 *     nest(order, time, group, dur, row, parent, depth) -> None
 *
 * with ``order`` (int64, 2n): point ids sorted stably by (group, time), point p < n the open
 * of event p and point n + p its close; ``time`` and ``group`` (float64 / int64, 2n) per point
 * id; ``dur`` (float64, n, finite and >= 0) and ``row`` (int64, n, the file-order tie-break)
 * per event; ``parent`` and ``depth`` (int64, n) are written. NaN times or durations are the
 * caller's to exclude (the numpy path orders them by numpy's NaN rules). Only the Python C API
 * is used (buffers in, buffers out); the GIL is released during the pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* One point of an instant that holds several, with its sort keys. */
typedef struct {
    int cls;          /* -1..3, see instant_keys */
    double sub1;      /* duration key */
    int64_t sub2;     /* file-order key */
    int64_t pos;      /* position in the (group, time) order: keeps the sort stable */
    int64_t point;
} Key;

static int key_less(const Key *a, const Key *b)
{
    if (a->cls != b->cls) return a->cls < b->cls;
    if (a->sub1 != b->sub1) return a->sub1 < b->sub1;
    if (a->sub2 != b->sub2) return a->sub2 < b->sub2;
    return a->pos < b->pos;
}

static int key_cmp(const void *x, const void *y)
{
    const Key *a = x, *b = y;
    return key_less(a, b) ? -1 : (key_less(b, a) ? 1 : 0);
}

/*
 * Sort keys of the m points of one instant, as _instant_order_keys computes them: positive
 * closes, then positive opens, when the instant holds both (back-to-back siblings: the ending
 * event closes first); otherwise opens before closes. Zero-duration points sit between
 * (class 1), except at an instant holding both, where one written before the first opening
 * event goes first (-1) and any other last (3). Opens: longer first, then file order. Closes:
 * shorter first, then reverse file order. Zero points: open before close.
 */
static void instant_keys(Key *keys, const int64_t *order, int64_t first, int64_t m, int64_t n,
                         const double *dur, const int64_t *row)
{
    int has_open = 0, has_close = 0;
    int64_t first_open_row = INT64_MAX;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = order[first + k];
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
        int64_t p = order[first + k];
        int is_open = p < n;
        int64_t ev = is_open ? p : p - n;
        double d = dur[ev];
        Key *key = &keys[k];
        key->pos = k;
        key->point = p;
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

typedef struct {
    int64_t n, height, *stack, *parent, *depth;
} Sweep;

/* One point of the sweep. Returns -1 when a close finds the stack empty (unbalanced input). */
static int sweep_point(Sweep *s, int64_t p)
{
    if (p < s->n) {
        s->depth[p] = s->height;
        s->parent[p] = s->height ? s->stack[s->height - 1] : -1;
        s->stack[s->height++] = p;
        return 0;
    }
    if (s->height == 0)
        return -1;
    s->height--;
    return 0;
}

/* The whole pass; 0, or -1 on an unbalanced order, -2 when out of memory. */
static int nest_pass(int64_t n, const int64_t *order, const double *time, const int64_t *group,
                     const double *dur, const int64_t *row, int64_t *parent, int64_t *depth)
{
    Sweep s = {n, 0, malloc((size_t)(n ? n : 1) * sizeof(int64_t)), parent, depth};
    Key *keys = NULL;
    int64_t cap = 0, i = 0, total = 2 * n;
    int rc = 0;
    if (!s.stack)
        return -2;
    while (i < total && rc == 0) {
        int64_t p = order[i], j = i + 1;
        while (j < total && time[order[j]] == time[p] && group[order[j]] == group[p])
            j++;
        if (j - i == 1) {
            rc = sweep_point(&s, p);
        } else {
            if (j - i > cap) {
                cap = 2 * (j - i);
                Key *grown = realloc(keys, (size_t)cap * sizeof(Key));
                if (!grown) {
                    rc = -2;
                    break;
                }
                keys = grown;
            }
            instant_keys(keys, order, i, j - i, n, dur, row);
            for (int64_t k = 0; k < j - i && rc == 0; k++)
                rc = sweep_point(&s, keys[k].point);
        }
        i = j;
    }
    free(keys);
    free(s.stack);
    return rc;
}

/* A C-contiguous buffer of `count` items of `itemsize` bytes, writable when asked. */
static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t count, Py_ssize_t itemsize,
                      int writable, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->len != count * itemsize) {
        PyErr_Format(PyExc_ValueError, "nest: %s has %zd bytes, expected %zd", what, view->len,
                     count * itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *nest(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[7];
    static const char *names[7] = {"order", "time", "group", "dur", "row", "parent", "depth"};
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6]))
        return NULL;
    Py_buffer dur_view;
    if (PyObject_GetBuffer(objs[3], &dur_view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = dur_view.len / (Py_ssize_t)sizeof(double);
    PyBuffer_Release(&dur_view);
    Py_buffer views[7];
    const Py_ssize_t counts[7] = {2 * n, 2 * n, 2 * n, n, n, n, n};
    const Py_ssize_t sizes[7] = {8, 8, 8, 8, 8, 8, 8};
    int got = 0;
    for (; got < 7; got++)
        if (get_buffer(objs[got], &views[got], counts[got], sizes[got], got >= 5, names[got]) < 0)
            break;
    int rc = 0;
    if (got == 7) {
        Py_BEGIN_ALLOW_THREADS
        rc = nest_pass(n, views[0].buf, views[1].buf, views[2].buf, views[3].buf, views[4].buf,
                       views[5].buf, views[6].buf);
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    if (got < 7)
        return NULL;
    if (rc == -2)
        return PyErr_NoMemory();
    if (rc == -1) {
        PyErr_SetString(PyExc_ValueError, "nest: a close precedes its open in the point order");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef nest_methods[] = {
    {"nest", nest, METH_VARARGS,
     "nest(order, time, group, dur, row, parent, depth) -> None\n\n"
     "Order the points of each instant by the call-stack tie rules and sweep them: writes each\n"
     "event's parent position (-1 at the top) and depth (see callstack.nest)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef nest_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_nest",
    .m_doc = "Linear call-stack sweep (see perfreport.analyses.callstack for the reference).",
    .m_size = -1,
    .m_methods = nest_methods,
};

PyMODINIT_FUNC PyInit__nest(void)
{
    return PyModule_Create(&nest_module);
}
