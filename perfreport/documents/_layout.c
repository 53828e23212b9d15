/*
 * _layout.c - the layout of perfreport's JSON documents, in C.
 *
 *     layout(compact, depth=0) -> bytes
 *
 * ``compact`` is JSON without whitespace outside strings (what msgspec encodes). The result is
 * the same value laid out for people and for line-based tools:
 *
 *  - a *leaf* container, an array or object holding no array or object, stays as it is, on one
 *    line: a table's row, a list of numbers, an empty container;
 *  - any other container has each member on a line of its own, indented two spaces a level, a
 *    space after each key's ':' (msgspec's ``format(indent=2)``), its nested lines ``depth``
 *    levels in (the value is then part of a document whose outer levels are written elsewhere).
 *
 * Why: msgspec's indented layout puts every field of every row on a line of its own. A compare
 * of two many-step ranks writes tens of tables of a row per step: its report.json was 1.34 GB,
 * over two fifths of it newlines, indentation and spaces, and encoding it took a quarter of the
 * command.
 *
 * Two passes over the text: the first finds where each leaf ends and the exact length of the
 * result, the second writes it into a bytes object of that length, a leaf with one memcpy.
 * Strings are copied as they are. Text that is not compact JSON's brackets and strings
 * (unbalanced or mismatched brackets, a string that does not end, whitespace) raises
 * ValueError. ``layout.py`` holds the same passes in Python for an install without a compiler;
 * the tests hold the two to the same bytes.
 *
 *     rows(keys, columns, n, sep) -> bytes
 *
 * A table's rows as objects, ``{"k0":v0,"k1":v1}`` joined by ``sep``, from its columns each
 * encoded alone: ``keys[i]`` is column i's name as a JSON string and a ':', ``columns[i]`` its
 * ``n`` values as a compact JSON array of scalars (what msgspec encodes from a list). The bytes
 * are those of the rows encoded one by one (jsondoc._RowsJson's msgspec Structs, the
 * reference): each value's text is copied as the column's encoding holds it. Why: making a
 * Struct per row was a third of writing a table of a row per step (0.19 of 0.79 s for the
 * gloo-only pair grown to 1 GB, 204,580 steps a side). A column that is not an array of n
 * scalars raises ValueError (the caller takes the Structs' way).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define INDENT 2 /* spaces per level */

/* One open container of the first pass. */
typedef struct {
    Py_ssize_t ordinal; /* its position among all containers, in the order they open */
    Py_ssize_t commas, colons;
    int has_child; /* holds an array or object: not a leaf */
    char close;    /* the bracket that closes it */
} Open;

typedef struct {
    Open *items;
    Py_ssize_t n, cap;
} Stack;

static int stack_push(Stack *s, Open o)
{
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        Open *items = PyMem_RawRealloc(s->items, (size_t)cap * sizeof *items);
        if (!items)
            return -1;
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = o;
    return 0;
}

/* The position after the string whose opening quote is at p, or NULL when it does not end. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            return NULL;
        /* the quote ends the string unless an odd run of backslashes escapes it */
        const char *b = q;
        while (b > p && b[-1] == '\\')
            b--;
        if (((q - b) & 1) == 0)
            return q + 1;
        p = q;
    }
    return NULL;
}

/* What the first pass found wrong (it runs without the GIL: the caller raises). */
enum { OK = 0, NO_MEMORY, OPEN_STRING, UNMATCHED, UNCLOSED, WHITESPACE };

/* First pass: where each container ends when it is a leaf (``*leaf_end``, by ordinal, 0 for the
 * others; PyMem_Raw) and the result's length. Returns OK or what is
 * wrong, at byte ``*at``. Needs no GIL. */
static int measure(const char *text, Py_ssize_t n, Py_ssize_t depth, Py_ssize_t **leaf_end, Py_ssize_t *out_len,
                   Py_ssize_t *at)
{
    const char *p = text, *end = text + n;
    Stack stack = {0};
    Py_ssize_t containers = 0, cap = 0, size = n;
    Py_ssize_t *ends = NULL;
    int err = OK;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            const char *q = skip_string(p, end);
            if (!q) {
                err = OPEN_STRING;
                break;
            }
            p = q;
            continue;
        }
        if (c == '{' || c == '[') {
            if (stack.n)
                stack.items[stack.n - 1].has_child = 1;
            if (containers == cap) {
                cap = cap ? cap * 2 : 1024;
                Py_ssize_t *grown = PyMem_RawRealloc(ends, (size_t)cap * sizeof *ends);
                if (!grown) {
                    err = NO_MEMORY;
                    break;
                }
                ends = grown;
            }
            ends[containers] = 0;
            if (stack_push(&stack, (Open){containers++, 0, 0, 0, c == '{' ? '}' : ']'}) < 0) {
                err = NO_MEMORY;
                break;
            }
        } else if (c == '}' || c == ']') {
            if (!stack.n || stack.items[stack.n - 1].close != c) {
                err = UNMATCHED;
                break;
            }
            Open o = stack.items[--stack.n];
            Py_ssize_t level = depth + stack.n; /* the container's own level */
            if (!o.has_child) /* as it is */
                ends[o.ordinal] = p + 1 - text;
            else /* a line per member (and for the closing bracket), a space after each key's ':' */
                size += (o.commas + 1) * (1 + INDENT * (level + 1)) + (1 + INDENT * level) + o.colons;
        } else if (c == ',') {
            if (stack.n)
                stack.items[stack.n - 1].commas++;
        } else if (c == ':') {
            if (stack.n)
                stack.items[stack.n - 1].colons++;
        } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            err = WHITESPACE;
            break;
        }
        p++;
    }
    if (err == OK && stack.n)
        err = UNCLOSED;
    *at = p - text;
    PyMem_RawFree(stack.items);
    if (err != OK) {
        PyMem_RawFree(ends);
        ends = NULL;
    }
    *leaf_end = ends;
    *out_len = size;
    return err;
}

static char *put_line(char *o, Py_ssize_t level)
{
    *o++ = '\n';
    memset(o, ' ', (size_t)(INDENT * level));
    return o + INDENT * level;
}

/* Second pass: write the layout into ``o`` (exactly the first pass's length). Only containers
 * that are not leaves are ever open here (a leaf is copied whole), so the nesting needs no
 * stack: a close bracket or a comma is always that of an open container. Needs no GIL. */
static void write_layout(const char *text, Py_ssize_t n, Py_ssize_t depth, const Py_ssize_t *leaf_end, char *o)
{
    const char *p = text, *end = text + n;
    Py_ssize_t open = 0, ordinal = 0;
    while (p < end) {
        char c = *p;
        if (c == '"') {
            const char *q = skip_string(p, end); /* it ends: the first pass checked */
            memcpy(o, p, (size_t)(q - p));
            o += q - p;
            p = q;
            continue;
        }
        if (c == '{' || c == '[') {
            Py_ssize_t stop = leaf_end[ordinal++];
            if (stop) { /* a leaf: as it is */
                memcpy(o, p, (size_t)(text + stop - p));
                o += text + stop - p;
                p = text + stop;
                continue;
            }
            *o++ = c;
            o = put_line(o, depth + ++open);
        } else if (c == '}' || c == ']') {
            o = put_line(o, depth + --open);
            *o++ = c;
        } else if (c == ',') {
            *o++ = ',';
            o = put_line(o, depth + open);
        } else if (c == ':') {
            *o++ = ':';
            *o++ = ' ';
        } else {
            *o++ = c;
        }
        p++;
    }
}

static PyObject *layout(PyObject *self, PyObject *args)
{
    static const char *const problems[] = {"", "", "a string that does not end", "an unmatched bracket",
                                           "a container that does not end", "whitespace outside a string"};
    Py_buffer buf;
    Py_ssize_t depth = 0, size = 0, at = 0, *leaf_end = NULL;
    PyObject *out = NULL;
    int err;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*|n", &buf, &depth))
        return NULL;
    if (depth < 0 || depth > 1000000) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "depth out of range");
        return NULL;
    }
    const char *text = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    err = measure(text, buf.len, depth, &leaf_end, &size, &at);
    Py_END_ALLOW_THREADS
    if (err == NO_MEMORY)
        PyErr_NoMemory();
    else if (err != OK)
        PyErr_Format(PyExc_ValueError, "not compact JSON: %s at byte %zd", problems[err], at);
    else if ((out = PyBytes_FromStringAndSize(NULL, size))) {
        char *o = PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        write_layout(text, buf.len, depth, leaf_end, o);
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(leaf_end);
    PyBuffer_Release(&buf);
    return out;
}


/* The end of the scalar at p (a string, or a number/literal up to ',' or ']'), or NULL. */
static const char *scalar_end(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"') {
        for (p++; p < end; p++) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                return p + 1;
        }
        return NULL;
    }
    if (*p == '[' || *p == '{' || *p == ',' || *p == ']')
        return NULL;
    while (p < end && *p != ',' && *p != ']')
        p++;
    return p;
}

static PyObject *rows(PyObject *self, PyObject *args)
{
    PyObject *keys, *columns;
    Py_ssize_t n;
    Py_buffer sep;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!ny*", &PyTuple_Type, &keys, &PyTuple_Type, &columns, &n, &sep))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(keys), total = 0;
    PyObject *out = NULL;
    const char **at = NULL; /* per column: where its next value starts */
    const char **ends = NULL;
    if (k == 0 || PyTuple_GET_SIZE(columns) != k || n <= 0) {
        PyErr_SetString(PyExc_ValueError, "rows: as many columns as keys, and rows, are needed");
        goto done;
    }
    at = PyMem_Calloc((size_t)k, sizeof *at);
    ends = PyMem_Calloc((size_t)k, sizeof *ends);
    if (!at || !ends) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *key = PyTuple_GET_ITEM(keys, c), *col = PyTuple_GET_ITEM(columns, c);
        if (!PyBytes_Check(key) || !PyBytes_Check(col)) {
            PyErr_SetString(PyExc_TypeError, "rows: keys and columns are bytes");
            goto done;
        }
        const char *p = PyBytes_AS_STRING(col), *e = p + PyBytes_GET_SIZE(col);
        if (e - p < 2 || p[0] != '[' || e[-1] != ']') {
            PyErr_SetString(PyExc_ValueError, "rows: a column is not a JSON array");
            goto done;
        }
        /* each value's text, its separators left out, and the key before it in every row */
        total += (e - p - 2) - (n - 1) + n * PyBytes_GET_SIZE(key);
        at[c] = p + 1;
        ends[c] = e - 1;
    }
    total += n * (2 + (k - 1)) + (n - 1) * sep.len; /* braces, commas between members, separators */
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out)
        goto done;
    char *o = PyBytes_AS_STRING(out), *o_end = o + total;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (r) {
            memcpy(o, sep.buf, (size_t)sep.len);
            o += sep.len;
        }
        *o++ = '{';
        for (Py_ssize_t c = 0; c < k; c++) {
            PyObject *key = PyTuple_GET_ITEM(keys, c);
            const char *p = at[c], *q = scalar_end(p, ends[c]);
            Py_ssize_t klen = PyBytes_GET_SIZE(key);
            if (!q || (r + 1 < n ? (q >= ends[c] || *q != ',') : q != ends[c]) ||
                o + klen + (q - p) + 2 > o_end) {
                PyErr_Format(PyExc_ValueError, "rows: column %zd does not hold %zd scalars", c, n);
                Py_CLEAR(out);
                goto done;
            }
            if (c)
                *o++ = ',';
            memcpy(o, PyBytes_AS_STRING(key), (size_t)klen);
            o += klen;
            memcpy(o, p, (size_t)(q - p));
            o += q - p;
            at[c] = q + 1;
        }
        *o++ = '}';
    }
    if (o != o_end) {
        PyErr_SetString(PyExc_ValueError, "rows: the columns' lengths do not add up");
        Py_CLEAR(out);
    }
done:
    PyMem_Free(at);
    PyMem_Free(ends);
    PyBuffer_Release(&sep);
    return out;
}

static PyMethodDef methods[] = {
    {"layout", layout, METH_VARARGS,
     "layout(compact, depth=0) -> bytes: compact JSON with every container that holds another\n"
     "one laid out a member per line, indented two spaces a level from depth; the others as they are."},
    {"rows", rows, METH_VARARGS,
     "rows(keys, columns, n, sep) -> bytes: n rows as JSON objects joined by sep, from each column's\n"
     "compact JSON array of scalars and its key ('\"name\":')."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_layout", NULL, -1, methods};

PyMODINIT_FUNC PyInit__layout(void) { return PyModule_Create(&module); }
