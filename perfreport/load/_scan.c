/*
 * _scan.c - one-pass scanner of a Kineto ``traceEvents`` JSON array into columns.
 *
 * This is the fast equivalent of ``scan_py.scan``; the contract (field kinds, missing values,
 * string interning) is documented in ``fields.py``. Python calls
 *
 *     scan(buf, top_fields, arg_fields) -> (n_events, top, arg_rows, arg_values, strings)
 *
 * where ``buf`` holds the JSON text of the array itself and the field specs are sequences of
 * ``(key, kind)`` pairs, or
 *
 *     scan_document(buf, top_fields, arg_fields, release=False, checksum=False, feed=None)
 *         -> (n_events, top, arg_rows, arg_values, strings, members)
 *         -> ((n_events, top, arg_rows, arg_values, strings, members), digest, seconds)   (checksum)
 *
 * where ``buf`` holds a whole trace file (the top-level object): its ``traceEvents`` array is
 * scanned in place, in the same single pass that validates the rest of the document, and every
 * other member comes back in ``members`` as ``(key, (start, end))``, the byte span of its value
 * (duplicate keys are all listed; the last "traceEvents" is the one scanned). With ``feed``
 * the text is written while it is scanned (see feed_wait: perfreport.load.streamed). Python
 * decodes only those small values. Columns come back as ``Column`` objects: buffers (native-endian
 * float64 / int64 / int32) that own the block the scanner wrote them into, so nothing is
 * copied at the end; Python wraps them with np.frombuffer. They are writable: the decode
 * converts some in place instead of writing a second column of fresh pages. This module needs only
 * the Python C API.
 *
 * How it works. The parser walks the text once and validates it fully (any malformed or
 * truncated input raises ValueError with a byte offset; nothing is read past the buffer).
 * While walking an event it only remembers *where* the value of each wanted key is (a Span),
 * and the values are converted when the event's closing brace is reached: deferring keeps
 * "last duplicate key wins" exact (an overwritten value is never interned), and a span already
 * says whether a string has escapes or a number has a fraction. Two kinds of value come
 * converted in their span: a text the cache knows (its code) and a plain number of a numeric
 * field (read_number: its value, computed while its digits are at hand). Strings are interned
 * in a C hash table keyed by their bytes; a Python ``str`` is created once per distinct text at
 * the very end.
 *
 * Where the time goes (about 11 instructions per byte of a Kineto trace): keys are predicted
 * from the key that preceded them (KeyMemo: the member text '"key": ' compared in 32 bytes
 * instead of validating and looking up the key), strings, arrays and objects of kind 's' seen
 * before are recognised by their raw bytes (the text cache: no validation, no minifying, no
 * hashing of the whole text), Kineto's own spacing (', "') is matched in one step, plain string content
 * is skipped 16 bytes at a time (SSE2, part of every x86-64; 8 at a time in a 64-bit word
 * elsewhere), digit runs 8 at a time, numbers of up to 19 digits converted by SWAR, and the
 * columns are sized for the whole array after its first events instead of growing by copies.
 *
 * Module attribute KINDS lists the field kinds this build understands ("fins").
 *
 * Deliberate differences from scan_py, all on input that scan_py rejects or crashes on:
 *  - non-object array elements are events with every field missing (scan_py's typed decoder
 *    raises on them);
 *  - (none for text that is not valid UTF-8: both decode it with "replace", U+FFFD for each
 *    invalid sequence. Two byte strings can then decode to one text: the Python wrapper merges
 *    their codes, see scanner.unique_strings);
 *  - a hexadecimal string beyond the float range in an 'f' field gives +-inf where scan_py's
 *    float(int(s, 16)) raises OverflowError;
 *  - an integer literal of more than 4300 digits in an 'i' field is INT64_MIN where scan_py's
 *    int() raises ValueError;
 *  - kind 'n': a hexadecimal string whose ns overflow int64 is INT64_MIN (scan_py's np.array
 *    raises OverflowError), and so is an exponent so large that Python's Decimal raises
 *    decimal.Overflow (beyond 1e999999).
 * Lone UTF-16 surrogate escapes raise ValueError in any string, converted or skipped, as msgspec
 * does (so a document is valid for both or neither).
 *
 * scan_document raises ValueError for everything that makes the document unusable: malformed
 * JSON (with a byte offset into the document), a top level that is not an object, no
 * "traceEvents" key, a "traceEvents" that is not an array, a top-level key that is not valid
 * UTF-8 (UnicodeDecodeError). Python turns these into its own messages.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__GLIBC__) || defined(__APPLE__)
#include <locale.h>
#if defined(__APPLE__)
#include <xlocale.h>
#endif
#define HAVE_STRTOD_L 1
static locale_t c_numeric; /* the "C" locale's number format (module init); 0: use Python's parser */
#else
#define HAVE_STRTOD_L 0
#endif

/* XXH3-128 of the file as it is scanned (scan_document's ``checksum``): the xxHash library's
 * own header (vendored, BSD 2-clause; the ``xxhash`` package computes the same digest). */
#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

#define MAX_DEPTH 1024          /* containers nested deeper than this are rejected */
#define MAX_FIELDS 4096         /* per field spec; field indices are stored as int16 */
#define INT_MISSING INT64_MIN   /* kind 'i' and 'n' sentinel (fields.INT_MISSING) */
#define CODE_MISSING (-1)       /* kind 's' sentinel */
#define ROWS_BYTES 4            /* the args' rows are int32 (module attribute ROWS_BYTES) */
#define MAX_EVENTS INT32_MAX    /* so that every row fits them (limits.max_events is far below) */
#define KINDS "fins"            /* the field kinds understood (exported as the module's KINDS) */

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define ALWAYS_INLINE inline
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#endif

/* ------------------------------------------------------------------------------------------ */
/* Growable byte buffer                                                                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

/* The GIL. The "traceEvents" array is scanned with it released, so that other threads of the
 * process run beside the scan: the checksum of the file, the imports of what comes after the
 * load. Everything the scanner allocates comes from PyMem_Raw*, which needs no GIL; the few
 * paths into the rest of the Python C API under the scan (setting an error, numbers in rare
 * spellings that Python itself converts) take the GIL back for their duration. GIL_ENTER /
 * GIL_LEAVE bracket such a path; PyGILState_Ensure works whether or not this thread holds the
 * GIL at that point (scan() and the top-level members run with it held). */
#define GIL_ENTER PyGILState_STATE gil_state_ = PyGILState_Ensure()
#define GIL_LEAVE PyGILState_Release(gil_state_)

/* Set MemoryError (taking the GIL for it); returns -1 for ``return no_memory();``. */
static int no_memory(void)
{
    GIL_ENTER;
    PyErr_NoMemory();
    GIL_LEAVE;
    return -1;
}

/* Grow ``b`` so that ``need`` more bytes fit (capacity doubles): the rare, out-of-line half
 * of buf_reserve. -1 with MemoryError set on failure. */
static int buf_grow(Buf *b, size_t need)
{
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < need) {
        if (cap > SIZE_MAX / 2) {
            no_memory();
            return -1;
        }
        cap *= 2;
    }
    char *data = PyMem_RawRealloc(b->data, cap);
    if (!data) {
        no_memory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Make room for ``need`` more bytes. -1 with MemoryError set on failure. Afterwards data is
 * never NULL, so callers may memcpy into it even when need is 0. Inline: it runs for every
 * value appended, and almost always finds the room already there. */
static inline int buf_reserve(Buf *b, size_t need)
{
    if (LIKELY(b->data && b->cap - b->len >= need))
        return 0;
    return buf_grow(b, need);
}

static inline int buf_append(Buf *b, const void *src, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* Append one value of n > 0 bytes: the columns' appends, several per event. An empty Buf has
 * cap 0, so the one comparison also catches a NULL data (buf_reserve tests both for need 0). */
static ALWAYS_INLINE int buf_put(Buf *b, const void *v, size_t n)
{
    if (UNLIKELY(b->cap - b->len < n) && buf_grow(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, v, n);
    b->len += n;
    return 0;
}

static inline int buf_put_f64(Buf *b, double v) { return buf_put(b, &v, sizeof v); }
static inline int buf_put_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }
static inline int buf_put_i32(Buf *b, int32_t v) { return buf_put(b, &v, sizeof v); }

static void buf_free(Buf *b)
{
    PyMem_RawFree(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Hashing and the string interner                                                              */
/* ------------------------------------------------------------------------------------------ */

static inline uint64_t load64(const char *s)
{
    uint64_t w;
    memcpy(&w, s, 8);
    return w;
}

static inline uint32_t load32(const char *s)
{
    uint32_t w;
    memcpy(&w, s, 4);
    return w;
}

/* a[0:n] == b[0:n], inline: the texts compared (member keys, repeated values) are mostly a few
 * bytes long, where a call to the library's memcmp costs more than the comparison. Reads only
 * inside both ranges (overlapping loads for the tail). */
static inline int bytes_equal(const char *a, const char *b, size_t n)
{
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            if (load64(a + i) != load64(b + i))
                return 0;
        return load64(a + n - 8) == load64(b + n - 8);
    }
    if (n >= 4)
        return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* Offset of the first flagged byte of a non-zero mask (string_stop_mask, nondigit_mask); 0 when
 * we cannot tell, which is still correct: the byte loop after it finishes the search. */
static inline size_t first_flagged_byte(uint64_t m)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (size_t)__builtin_ctzll(m) >> 3;
#else
    (void)m;
    return 0;
#endif
}

static inline uint64_t rotl64(uint64_t x, int r) { return x << r | x >> (64 - r); }

#define PRIME1 0x9E3779B185EBCA87ULL
#define PRIME2 0xC2B2AE3D27D4EB4FULL

/* One round of xxHash64's structure: four of these run independently on 32-byte blocks. */
static inline uint64_t hash_round(uint64_t acc, uint64_t w) { return rotl64(acc + w * PRIME2, 31) * PRIME1; }

/* A 64-bit hash of a byte string, shaped like xxHash64 (four independent lanes, so long kernel
 * names hash at several bytes per cycle). Not cryptographic: texts come from trace files, and
 * linear probing with a full-hash check degrades gracefully anyway. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = (uint64_t)n * PRIME1;
    if (n >= 32) {
        uint64_t a = PRIME1 + PRIME2, b = PRIME2, c = 0, d = 0 - PRIME1;
        do {
            a = hash_round(a, load64(s));
            b = hash_round(b, load64(s + 8));
            c = hash_round(c, load64(s + 16));
            d = hash_round(d, load64(s + 24));
            s += 32;
            n -= 32;
        } while (n >= 32);
        h ^= rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18);
    }
    for (; n >= 8; s += 8, n -= 8)
        h = rotl64(h ^ hash_round(0, load64(s)), 27) * PRIME1 + 0x85EBCA77C2B2AE63ULL;
    if (n) {
        /* the last 1..7 bytes in at most two loads instead of a byte-wise copy */
        uint64_t w;
        if (n >= 4) {
            uint32_t lo, hi;
            memcpy(&lo, s, 4);
            memcpy(&hi, s + n - 4, 4);
            w = (uint64_t)hi << 32 | lo;
        } else {
            w = (uint64_t)(unsigned char)s[0] << 16 | (uint64_t)(unsigned char)s[n >> 1] << 8 |
                (unsigned char)s[n - 1];
        }
        h = rotl64(h ^ hash_round(0, w), 27) * PRIME1;
    }
    h ^= h >> 33;
    h *= PRIME2;
    h ^= h >> 29;
    return h;
}

/* A cheap hash for looking up member keys (short; most are not wanted, so the probe usually
 * stops at an empty slot after this and one comparison at most). */
static inline uint64_t key_hash(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    uint64_t h = (uint64_t)n | (uint64_t)(unsigned char)s[0] << 8 | (uint64_t)(unsigned char)s[n >> 1] << 16 |
                 (uint64_t)(unsigned char)s[n - 1] << 24;
    h *= PRIME1;
    return h ^ h >> 29;
}

typedef struct {
    uint64_t hash;
    size_t off, len; /* the text is interner.text.data[off : off + len] */
} InternEntry;

/* The string table: text -> code, in order of first appearance, the codes of most texts found
 * through hashed slots. A trace of many steps has a name of its own per step ("ProfilerStep#N"):
 * in the slots they made the table outgrow the caches (345,394 texts, 4 MB of slots and 8 MB of
 * entries on the triton example grown to 1 GB), each new name a probe of memory. So step names
 * are kept apart, in an array indexed by N (see step_entry), and the slots hold the rest. */
typedef struct {
    Buf text;             /* all distinct texts back to back */
    InternEntry *entries; /* entries[code] */
    size_t n, cap;
    int32_t *slots;       /* open addressing, linear probing: a code, or -1 when empty */
    size_t nslots;        /* a power of two, at least twice n_hashed */
    size_t n_hashed;      /* codes in the slots: all but the step names below */
    int32_t *steps;       /* steps[N - step_base]: the code of "ProfilerStep#N", or -1 (see step_entry) */
    size_t steps_cap;
    uint64_t step_base;   /* N of the first step name met, -1 (UINT64_MAX) before */
} Interner;

#define STEP_SPAN (1u << 22) /* step names from step_base to step_base + STEP_SPAN - 1 skip the slots */
#define NOT_HASHED 0         /* InternEntry.hash of a step name kept in Interner.steps (no text hashes to it) */

static int interner_init(Interner *I)
{
    I->step_base = UINT64_MAX;
    I->nslots = 1024;
    I->slots = PyMem_RawMalloc(I->nslots * sizeof *I->slots);
    if (!I->slots) {
        no_memory();
        return -1;
    }
    memset(I->slots, 0xFF, I->nslots * sizeof *I->slots);
    return 0;
}

static void interner_free(Interner *I)
{
    buf_free(&I->text);
    PyMem_RawFree(I->entries);
    PyMem_RawFree(I->slots);
    PyMem_RawFree(I->steps);
    I->entries = NULL;
    I->slots = NULL;
    I->steps = NULL;
}

/* Double the slot table and re-insert every code. */
static int interner_rehash(Interner *I)
{
    size_t nslots = I->nslots * 2;
    int32_t *slots = PyMem_RawMalloc(nslots * sizeof *slots);
    if (!slots) {
        no_memory();
        return -1;
    }
    memset(slots, 0xFF, nslots * sizeof *slots);
    for (size_t code = 0; code < I->n; code++) {
        if (I->entries[code].hash == NOT_HASHED)
            continue; /* a step name: in I->steps */
        size_t i = I->entries[code].hash & (nslots - 1);
        while (slots[i] >= 0)
            i = (i + 1) & (nslots - 1);
        slots[i] = (int32_t)code;
    }
    PyMem_RawFree(I->slots);
    I->slots = slots;
    I->nslots = nslots;
    return 0;
}

/* Where the code of the step name s[0:n] is kept, when it is one kept apart; NULL for any
 * other text. Every step of a trace has a name of its own ("ProfilerStep#N", N counting up),
 * so a trace of 345,319 steps interns as many names, each new: in the slots, each took a probe
 * of a table far larger than the caches (and made it so for every other text). Kept apart, a
 * name is its N, an index into an array that grows with the steps. Which names are kept apart
 * depends on the text alone (and on the first step name of the document): "ProfilerStep#"
 * then 1 to 18 digits without a leading zero, N from step_base to step_base + STEP_SPAN - 1,
 * so a text is always looked for where it was put. -1 with an exception set on failure. */
static int step_entry(Interner *I, const char *s, size_t n, int32_t **entry)
{
    *entry = NULL;
    if (n < 14 || n > 13 + 18 || memcmp(s, "ProfilerStep#", 13) != 0 || (s[13] == '0' && n > 14))
        return 0;
    uint64_t v = 0;
    for (size_t k = 13; k < n; k++) {
        unsigned d = (unsigned)(unsigned char)s[k] - '0';
        if (d > 9)
            return 0;
        v = v * 10 + d;
    }
    if (I->step_base == UINT64_MAX)
        I->step_base = v;
    if (v < I->step_base || v - I->step_base >= STEP_SPAN)
        return 0;
    size_t k = (size_t)(v - I->step_base);
    if (k >= I->steps_cap) {
        size_t cap = I->steps_cap ? I->steps_cap : 1024;
        while (cap <= k)
            cap *= 2;
        int32_t *steps = PyMem_RawRealloc(I->steps, cap * sizeof *steps);
        if (!steps) {
            no_memory();
            return -1;
        }
        memset(steps + I->steps_cap, 0xFF, (cap - I->steps_cap) * sizeof *steps);
        I->steps = steps;
        I->steps_cap = cap;
    }
    *entry = &I->steps[k];
    return 0;
}

/* Add the new text s[0:n] with hash ``h`` (NOT_HASHED: a step name): its code, -1 with an
 * exception set on failure. */
static int32_t add_text(Interner *I, const char *s, size_t n, uint64_t h)
{
    if (I->n >= INT32_MAX) {
        GIL_ENTER;
        PyErr_SetString(PyExc_OverflowError, "more than 2**31 distinct strings");
        GIL_LEAVE;
        return -1;
    }
    if (I->n == I->cap) {
        size_t cap = I->cap ? I->cap * 2 : 1024;
        InternEntry *entries = PyMem_RawRealloc(I->entries, cap * sizeof *entries);
        if (!entries) {
            no_memory();
            return -1;
        }
        I->entries = entries;
        I->cap = cap;
    }
    size_t off = I->text.len;
    if (buf_append(&I->text, s, n) < 0)
        return -1;
    I->entries[I->n] = (InternEntry){h, off, n};
    return (int32_t)I->n++;
}

/* The code of text s[0:n], adding it when new. -1 with an exception set on failure. */
static int32_t intern(Interner *I, const char *s, size_t n)
{
    int32_t *step;
    if (step_entry(I, s, n, &step) < 0)
        return -1;
    if (step) /* a step name: its array entry, not the slots */
        return *step >= 0 ? *step : (*step = add_text(I, s, n, NOT_HASHED));
    uint64_t h = hash_bytes(s, n);
    if (h == NOT_HASHED)
        h = NOT_HASHED + 1; /* NOT_HASHED marks the step names */
    size_t mask = I->nslots - 1, i = h & mask;
    for (int32_t code; (code = I->slots[i]) >= 0; i = (i + 1) & mask) {
        const InternEntry *e = &I->entries[code];
        if (e->hash == h && e->len == n && bytes_equal(I->text.data + e->off, s, n))
            return code;
    }
    if ((I->n_hashed + 1) * 2 > I->nslots) {
        if (interner_rehash(I) < 0)
            return -1;
        mask = I->nslots - 1;
        for (i = h & mask; I->slots[i] >= 0; i = (i + 1) & mask)
            ;
    }
    int32_t code = add_text(I, s, n, h);
    if (code >= 0) {
        I->slots[i] = code;
        I->n_hashed++;
    }
    return code;
}

/* The string table as a list of str, in code order. */
static PyObject *interner_to_list(const Interner *I)
{
    PyObject *list = PyList_New((Py_ssize_t)I->n);
    if (!list)
        return NULL;
    for (size_t code = 0; code < I->n; code++) {
        const InternEntry *e = &I->entries[code];
        PyObject *s = PyUnicode_DecodeUTF8(I->text.data + e->off, (Py_ssize_t)e->len,
                                           "replace");
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)code, s);
    }
    return list;
}

/* ------------------------------------------------------------------------------------------ */
/* Field specs: (key, kind) pairs and a hash lookup from key bytes to field index               */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    const char *key; /* UTF-8, owned by the key str (alive for the whole call) */
    size_t len;
    uint64_t hash;
    char kind;       /* 'f', 'i', 'n' or 's' */
} Field;

typedef struct {
    Field *fields;
    Py_ssize_t n;
    int16_t *slots; /* field index, or -1 when empty */
    size_t mask;
} FieldMap;

static void fieldmap_free(FieldMap *m)
{
    PyMem_RawFree(m->fields);
    PyMem_RawFree(m->slots);
    m->fields = NULL;
    m->slots = NULL;
}

static inline int fieldmap_find(const FieldMap *m, const char *key, size_t len)
{
    uint64_t h = key_hash(key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        int k = m->slots[i];
        if (k < 0)
            return -1;
        const Field *f = &m->fields[k];
        if (f->hash == h && f->len == len && bytes_equal(f->key, key, len))
            return k;
    }
}

/* Build the map from a sequence of (key: str, kind: str). -1 with an exception on failure. */
static int fieldmap_init(FieldMap *m, PyObject *spec, const char *what)
{
    PyObject *seq = PySequence_Fast(spec, "field spec must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "%s: more than %d fields", what, MAX_FIELDS);
        goto fail;
    }
    size_t nslots = 16;
    while (nslots < 4 * (size_t)n)
        nslots *= 2;
    m->n = n;
    m->mask = nslots - 1;
    m->fields = PyMem_RawCalloc(n ? (size_t)n : 1, sizeof *m->fields);
    m->slots = PyMem_RawMalloc(nslots * sizeof *m->slots);
    if (!m->fields || !m->slots) {
        no_memory();
        goto fail;
    }
    memset(m->slots, 0xFF, nslots * sizeof *m->slots);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        PyObject *key, *kind;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyUnicode_Check(key = PyTuple_GET_ITEM(item, 0)) ||
            !PyUnicode_Check(kind = PyTuple_GET_ITEM(item, 1))) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be a (key: str, kind: str) tuple", what, k);
            goto fail;
        }
        Py_ssize_t klen, kindlen;
        const char *kbytes = PyUnicode_AsUTF8AndSize(key, &klen);
        const char *kindbytes = PyUnicode_AsUTF8AndSize(kind, &kindlen);
        if (!kbytes || !kindbytes)
            goto fail;
        if (kindlen != 1 || !strchr(KINDS, kindbytes[0])) {
            PyErr_Format(PyExc_ValueError, "%s[%zd]: kind must be one of %s, not %R", what, k, KINDS, kind);
            goto fail;
        }
        if (fieldmap_find(m, kbytes, (size_t)klen) >= 0) {
            PyErr_Format(PyExc_ValueError, "%s: duplicate key %R", what, key);
            goto fail;
        }
        Field *f = &m->fields[k];
        *f = (Field){kbytes, (size_t)klen, key_hash(kbytes, (size_t)klen), kindbytes[0]};
        size_t i = f->hash & m->mask;
        while (m->slots[i] >= 0)
            i = (i + 1) & m->mask;
        m->slots[i] = (int16_t)k;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Scanner state                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* What a remembered value is; decides how it converts. */
enum {
    V_STR,      /* string without escapes: its raw content is its text */
    V_STR_ESC,  /* string with escapes: must be decoded */
    V_INT,      /* number without fraction or exponent */
    V_FLOAT,    /* number with a fraction or exponent */
    V_LITERAL,  /* true / false / null: no whitespace inside, the raw text is the minified text */
    V_COMPOUND, /* array or object: minified for kind 's' */
    V_CODE,     /* string, array or object found in the text cache: already interned (Span.code) */
    V_READY,    /* a number of a kind-'n', -'f' or -'i' field, converted as it was read (Span.ready, read_number) */
};

#define KEY_MEMO_LEN 40  /* keys up to this many bytes are remembered */
#define KEY_MEMO_KEYS 64 /* distinct keys remembered per object kind (event, args) */
#define KEY_MEMO_HASH 128 /* slots of a KeyMemo's hash index (a power of two, > 1.5 x keys) */
#define KEY_START 0      /* KeyMemo entry: the start of an object, before its first key */
#define KEY_UNKNOWN 1    /* KeyMemo entry: after a key that is not remembered */

#define KEY_PATTERN 32 /* bytes of MemoKey.pattern: two SSE2 registers */
#define KEY_NEXT 4     /* followers remembered per key (see KeyMemo) */

/* One remembered key: its raw bytes, its field index, and the keys that followed it. */
typedef struct {
    char text[KEY_MEMO_LEN + 1]; /* the key's bytes and its closing quote */
    uint8_t len;                 /* bytes in text, quote included */
    int16_t field;               /* index in the field map, -1 when not wanted */
    char kind;                   /* the field's kind, 0 when not wanted */
    uint8_t is_args;             /* the key is "args" */
    uint8_t next[KEY_NEXT];      /* keys that followed this one, the most used first (0: none) */
    char pattern[KEY_PATTERN];   /* the member as the file writes it: '"key": ' (Kineto, json.dumps) or
                                  * '"key":' (compact writers: orjson, separators=(",", ":")), zero-padded */
    uint8_t pattern_len;         /* bytes of it: where its value starts */
    uint32_t pattern_mask;       /* bit i set for each byte of it; 0 when it does not fit */
} MemoKey;

/* The keys read so far in one kind of object (events, or their args), and which key followed
 * which. Kineto writes the members of every event of one kind in one fixed order, and a trace
 * has few kinds, so the key after a given key is nearly always one of the few seen after it
 * (KEY_NEXT, see follower_seen): comparing the raw bytes (closing quote included) with those
 * replaces validating the string and looking it up in the field map (>95% of keys on real
 * traces). Only keys without escapes are remembered, so a match is exactly the key read before. */
typedef struct {
    MemoKey keys[KEY_MEMO_KEYS]; /* keys[KEY_START], keys[KEY_UNKNOWN]: no text */
    int n;                       /* entries in use */
    uint8_t index[KEY_MEMO_HASH]; /* key_hash -> entry (linear probing; 0: empty) */
} KeyMemo;

/* Where the value of one wanted key is in the buffer: [p, q); p == NULL means absent. */
typedef struct {
    const char *p, *q;
    int type;
    int32_t code; /* the string code of a V_CODE value */
    union {
        int64_t i; /* kinds 'n' and 'i' */
        double f;  /* kind 'f' */
    } ready;       /* the value of a V_READY span */
} Span;

#define TEXT_CACHE_SLOTS 2048 /* entries of the text cache (a power of two) */
#define TEXT_CACHE_MAX 80     /* longest raw text it keeps */
#define TEXT_CACHE_KEY 32     /* bytes from a value's start that choose its entry (16 for a number) */

/* One string, array or object seen before in a kind-'s' field, as it is in the file, and the
 * code of its text (decoded, or minified). */
typedef struct {
    uint8_t len; /* 0: empty */
    int32_t code;
    char text[TEXT_CACHE_MAX];
} CachedText;

typedef struct {
    const char *base, *end; /* the JSON text */
    const char *what;       /* error message prefix: "invalid JSON in traceEvents" or "invalid JSON" */

    FieldMap top, arg;
    Buf *top_cols;  /* one dense column per top field */
    Buf *arg_rows;  /* int32 event positions per arg field (ROWS_BYTES each) */
    Buf *arg_vals;  /* values per arg field */
    Interner strings;

    Span *top_span;    /* per top field, for the current event */
    Span *arg_span;    /* per arg field, for the current event's args */
    int16_t *touched;  /* arg fields present in the current event, in first-seen order */
    Py_ssize_t n_touched;

    KeyMemo top_memo, arg_memo; /* see KeyMemo */
    CachedText *text_cache;     /* see text_cache_lookup */

    Buf scratch;   /* a decoded string or minified value being converted */
    Buf key_buf;   /* a decoded key that had escapes */
    int64_t n_events;

    int release;           /* hand back the pages of the events arrays scanned (see release_scanned) */
    const char *released;  /* pages before this were handed back */
    XXH3_state_t *hash;    /* the buffer's XXH3-128 as it is scanned (see hash_scanned); NULL: none */
    const char *hashed;    /* the bytes before this are in the hash */
    double hash_s;         /* seconds spent hashing (a phase of its own in the load's timings) */
    int64_t *feed;         /* text written while it is scanned (see feed_wait); NULL: all there */
    uintptr_t feed_check;  /* the scan asks the feed again from this address on (UINTPTR_MAX: never) */
} Scan;

#define HASH_STEP (64 << 10) /* hash the text every 64 kB scanned, while it is in the core's cache */

/* Seconds on a monotonic clock (the processor time used where there is none: MSVC). */
static double seconds_now(void)
{
#if defined(CLOCK_MONOTONIC)
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

/* scan_document's ``checksum``: the bytes scanned go into the hash in order, a few kB behind the
 * scanning position, before release_scanned hands their pages back (it never passes
 * S->hashed). The text is read once, not a second time by a hasher beside the scan. */
static void hash_to(Scan *S, const char *p)
{
    double t0 = seconds_now();
    XXH3_128bits_update(S->hash, S->hashed, (size_t)(p - S->hashed));
    S->hash_s += seconds_now() - t0;
    S->hashed = p;
}

static inline void hash_scanned(Scan *S, const char *p)
{
    if (S->hash && p - S->hashed >= HASH_STEP)
        hash_to(S, p);
}

static void feed_publish_position(Scan *S, const char *p); /* (see feed_wait) */
static void feed_pause(Scan *S);
static void feed_resume(Scan *S);

#define RELEASE_STEP (16 << 20) /* hand pages back every 16 MB scanned */
#define RELEASE_KEEP (1 << 20)  /* the last 1 MB scanned stays mapped */

/* scan_document's ``release``: the pages of a "traceEvents" array already scanned are handed
 * back to the kernel (madvise MADV_DONTNEED), so the text never sits whole in memory beside
 * the columns growing from it: the load's peak is the columns plus a few MB of text, not the
 * columns plus the whole text. Only inside the events arrays, never before the first one's
 * '[' nor within 1 MB of the scanning position, so the other top-level members (sliced by
 * their spans after the scan) are never touched. A page handed back reads again from the page
 * cache in a read-only file mapping, and as zeros in the caller's own memory (decompressed
 * text): the caller passes ``release`` only for text it does not read there again. */
static void release_scanned(Scan *S, const char *p)
{
#if defined(MADV_DONTNEED)
    if (!S->release || p - S->released < RELEASE_STEP + RELEASE_KEEP)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)S->released + page - 1) & ~(page - 1);
    uintptr_t to = ((uintptr_t)(p - RELEASE_KEEP)) & ~(page - 1);
    if (S->hash && to > (uintptr_t)S->hashed)
        to = (uintptr_t)S->hashed & ~(page - 1); /* never a page not yet hashed */
    if (to > from) {
        feed_pause(S);
        if (madvise((void *)from, to - from, MADV_DONTNEED) == 0)
            S->released = (const char *)to;
        feed_resume(S);
    }
    feed_publish_position(S, p);
#else
    (void)S;
    (void)p;
#endif
}

/* scan_document's ``feed``: a text being written (a gzipped file decompressed on another
 * thread) is scanned as it comes, so that it never sits whole in memory. feed[FEED_AVAIL]: the
 * bytes written so far, feed[FEED_DONE]: 1 once the writer has stopped (whatever the reason),
 * both published by feed_publish; feed[FEED_SCANNED]: how far the scan has got, which the
 * writer reads to stay at most a bounded distance ahead. The scan waits before each event
 * until FEED_MARGIN bytes past its start are written (or the writer is done): an event longer
 * than that, or a text shorter than the buffer, reads unwritten zeros and fails as malformed
 * JSON, and the caller then decompresses the text whole and scans it again. */
enum { FEED_AVAIL, FEED_DONE, FEED_SCANNED, FEED_CANCEL, FEED_PAUSE, FEED_WAITING, FEED_SLOTS };
#if defined(__GNUC__) && (defined(__unix__) || defined(__APPLE__)) /* atomics and nanosleep */
#define HAVE_FEED 1
#else
#define HAVE_FEED 0 /* no feed_publish: perfreport.load.streamed is not used */
#endif
#define FEED_PATIENCE_S 60.0 /* a writer that writes nothing for this long is given up on */
#define FEED_MARGIN (8 << 20)
static int64_t feed_margin = FEED_MARGIN; /* fewer bytes for tests: _set_feed_margin */

#if HAVE_FEED
static void nap(long ns) /* the waits of a feed's two sides for each other */
{
    struct timespec pause = {0, ns};
    nanosleep(&pause, NULL);
}
#endif

static void feed_publish_position(Scan *S, const char *p)
{
#if HAVE_FEED
    if (S->feed)
        __atomic_store_n(&S->feed[FEED_SCANNED], (int64_t)(p - S->base), __ATOMIC_RELAXED);
#else
    (void)S;
    (void)p;
#endif
}

/* Pages are handed back (release_scanned) while the feed's writer sleeps: handing back pages of
 * a process whose other thread runs on another core interrupts that core to flush its TLB, which
 * on the 2-core test VM made each 16 MB 14 ms of system time instead of 1 (0.18 s a 200 MB
 * text). The writer is asked to pause at its next chunk (FEED_PAUSE 1), says it has (2), and
 * goes on once the slot is 0 again; a writer that is done is not asked. */
static void feed_pause(Scan *S)
{
#if HAVE_FEED
    if (!S->feed || __atomic_load_n(&S->feed[FEED_DONE], __ATOMIC_ACQUIRE))
        return;
    __atomic_store_n(&S->feed[FEED_PAUSE], (int64_t)1, __ATOMIC_RELEASE);
    double since = seconds_now();
    while (__atomic_load_n(&S->feed[FEED_PAUSE], __ATOMIC_ACQUIRE) != 2 &&
           !__atomic_load_n(&S->feed[FEED_DONE], __ATOMIC_ACQUIRE) && seconds_now() - since < FEED_PATIENCE_S)
        nap(20000);
#else
    (void)S;
#endif
}

static void feed_resume(Scan *S)
{
#if HAVE_FEED
    if (S->feed)
        __atomic_store_n(&S->feed[FEED_PAUSE], (int64_t)0, __ATOMIC_RELEASE);
#else
    (void)S;
#endif
}

/* Wait (the GIL released by the caller) until FEED_MARGIN bytes past ``p`` are written or the
 * writer is done; then ``feed_check`` is where to ask again. */
static void feed_wait(Scan *S, const char *p)
{
#if !HAVE_FEED
    (void)p;
    S->feed_check = UINTPTR_MAX; /* (never reached: no feed without HAVE_FEED) */
    return;
#else
    int64_t need = (int64_t)(p - S->base) + feed_margin, size = (int64_t)(S->end - S->base);
    if (need > size)
        need = size;
    feed_publish_position(S, p);
    __atomic_store_n(&S->feed[FEED_WAITING], need, __ATOMIC_RELEASE); /* the writer does not hold back before it */
    int64_t avail, seen = -1;
    double since = 0.0;
    int gave_up = 0;
    while ((avail = __atomic_load_n(&S->feed[FEED_AVAIL], __ATOMIC_ACQUIRE)) < need &&
           !__atomic_load_n(&S->feed[FEED_DONE], __ATOMIC_ACQUIRE)) {
        if (avail != seen) {
            seen = avail;
            since = seconds_now();
        } else if (seconds_now() - since > FEED_PATIENCE_S) {
            gave_up = 1; /* the text then reads as zeros: malformed, and the caller's fallback */
            break;
        }
        nap(50000);
    }
    __atomic_store_n(&S->feed[FEED_WAITING], (int64_t)0, __ATOMIC_RELEASE);
    if (gave_up || __atomic_load_n(&S->feed[FEED_DONE], __ATOMIC_ACQUIRE) || avail >= size)
        S->feed_check = UINTPTR_MAX; /* all written, or never more: no more waiting */
    else
        S->feed_check = (uintptr_t)(S->base + avail - feed_margin);
#endif
}

static inline void feed_ready(Scan *S, const char *p)
{
    if (UNLIKELY((uintptr_t)p >= S->feed_check))
        feed_wait(S, p);
}

/* feed_ready where the caller holds the GIL: it is released while waiting (the writer may need it). */
static void feed_ready_gil(Scan *S, const char *p)
{
    if ((uintptr_t)p >= S->feed_check) {
        Py_BEGIN_ALLOW_THREADS
        feed_wait(S, p);
        Py_END_ALLOW_THREADS
    }
}

/* Raise ValueError for malformed JSON at ``at``; returns NULL so parsers can ``return`` it. */
static const char *syntax_error(Scan *S, const char *at, const char *msg)
{
    GIL_ENTER;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s at byte %zd: %s", S->what, (Py_ssize_t)(at - S->base), msg);
    GIL_LEAVE;
    return NULL;
}

static int scan_init(Scan *S, PyObject *top_spec, PyObject *arg_spec)
{
    S->feed_check = S->feed ? (uintptr_t)S->base : UINTPTR_MAX; /* a feed is asked from the start; none, never */
    if (fieldmap_init(&S->top, top_spec, "top_fields") < 0 ||
        fieldmap_init(&S->arg, arg_spec, "arg_fields") < 0 || interner_init(&S->strings) < 0)
        return -1;
    size_t nt = (size_t)S->top.n + 1, na = (size_t)S->arg.n + 1; /* +1: never calloc(0) */
    S->top_cols = PyMem_RawCalloc(nt, sizeof(Buf));
    S->arg_rows = PyMem_RawCalloc(na, sizeof(Buf));
    S->arg_vals = PyMem_RawCalloc(na, sizeof(Buf));
    S->top_span = PyMem_RawCalloc(nt, sizeof(Span));
    S->arg_span = PyMem_RawCalloc(na, sizeof(Span));
    S->touched = PyMem_RawCalloc(na, sizeof(int16_t));
    S->text_cache = PyMem_RawCalloc(TEXT_CACHE_SLOTS, sizeof(CachedText));
    if (!S->top_cols || !S->arg_rows || !S->arg_vals || !S->top_span || !S->arg_span || !S->touched ||
        !S->text_cache) {
        no_memory();
        return -1;
    }
    return 0;
}

static void scan_free(Scan *S)
{
    if (S->top_cols)
        for (Py_ssize_t k = 0; k < S->top.n; k++)
            buf_free(&S->top_cols[k]);
    if (S->arg_rows)
        for (Py_ssize_t k = 0; k < S->arg.n; k++)
            buf_free(&S->arg_rows[k]);
    if (S->arg_vals)
        for (Py_ssize_t k = 0; k < S->arg.n; k++)
            buf_free(&S->arg_vals[k]);
    PyMem_RawFree(S->top_cols);
    PyMem_RawFree(S->arg_rows);
    PyMem_RawFree(S->arg_vals);
    PyMem_RawFree(S->top_span);
    PyMem_RawFree(S->arg_span);
    PyMem_RawFree(S->touched);
    PyMem_RawFree(S->text_cache);
    fieldmap_free(&S->top);
    fieldmap_free(&S->arg);
    interner_free(&S->strings);
    buf_free(&S->scratch);
    buf_free(&S->key_buf);
}

/* Forget every event scanned so far (columns and string table), keeping the memory: a later
 * duplicate "traceEvents" key replaces the earlier array. */
static void scan_reset(Scan *S)
{
    for (Py_ssize_t k = 0; k < S->top.n; k++)
        S->top_cols[k].len = 0;
    for (Py_ssize_t k = 0; k < S->arg.n; k++)
        S->arg_rows[k].len = S->arg_vals[k].len = 0;
    S->strings.n = S->strings.n_hashed = 0;
    S->strings.text.len = 0;
    memset(S->strings.slots, 0xFF, S->strings.nslots * sizeof *S->strings.slots);
    if (S->strings.steps)
        memset(S->strings.steps, 0xFF, S->strings.steps_cap * sizeof *S->strings.steps);
    S->strings.step_base = UINT64_MAX; /* the next array's first step name sets it anew */
    memset(S->text_cache, 0, TEXT_CACHE_SLOTS * sizeof *S->text_cache); /* their codes are gone */
    S->n_events = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Lexing: whitespace, strings, numbers, literals                                               */
/* ------------------------------------------------------------------------------------------ */

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* High bit set in each byte of w that is not an ASCII digit. The lowest flagged byte is always
 * a true one (a carry only starts at a flagged byte and only corrupts bytes above it). */
static inline uint64_t nondigit_mask(uint64_t w)
{
    uint64_t x = w ^ 0x3030303030303030ULL; /* digits become 0..9 */
    return ((x + 0x7676767676767676ULL) | x) & 0x8080808080808080ULL;
}

/* The first byte at or after p that is not a digit (or end): 8 bytes at a time, as timestamps
 * and ids run to 16 digits and more. */
static ALWAYS_INLINE const char *skip_digits(const char *p, const char *end)
{
    while (end - p >= 8) {
        uint64_t m = nondigit_mask(load64(p));
        if (m) {
            p += first_flagged_byte(m);
            break;
        }
        p += 8;
    }
    while (p < end && is_digit(*p))
        p++;
    return p;
}

/* The value of the n <= 19 ASCII digits at p (below 10**19, so no overflow). Eight digits at a
 * time where words are little-endian: the three multiplications of Lemire's SWAR method
 * combine digit pairs, then pairs of pairs, then the two halves. */
static ALWAYS_INLINE uint64_t digits_value(const char *p, size_t n)
{
    uint64_t v = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w = load64(p) - 0x3030303030303030ULL;
        w = w * 10 + (w >> 8);
        w = ((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)) +
             ((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))) >> 32;
        v = v * 100000000ULL + w;
    }
#endif
    for (; n; p++, n--)
        v = v * 10 + (uint64_t)(*p - '0');
    return v;
}

static inline int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at p, all before end? */
static inline int is_hex4(const char *p, const char *end)
{
    return end - p >= 4 && hex_value(p[0]) >= 0 && hex_value(p[1]) >= 0 && hex_value(p[2]) >= 0 &&
           hex_value(p[3]) >= 0;
}

/* The value of four hex digits checked by is_hex4. */
static inline unsigned read_hex4(const char *p)
{
    return (unsigned)(hex_value(p[0]) << 12 | hex_value(p[1]) << 8 | hex_value(p[2]) << 4 | hex_value(p[3]));
}

static inline const char *skip_ws(const char *p, const char *end)
{
    if (LIKELY(p < end && (unsigned char)*p > ' ')) /* usually no whitespace at all, */
        return p;
    if (p < end && *p == ' ' && end - p > 1 && (unsigned char)p[1] > ' ') /* or one space */
        return p + 1;
    if (p < end && *p == '\n' && end - p > 9) { /* or a line break and up to 7 spaces (Kineto's layout) */
        uint64_t off = load64(p + 1) ^ 0x2020202020202020ULL; /* a zero byte for each space */
        if (off) {
            const char *q = p + 1 + first_flagged_byte(off); /* the first byte that is not a space */
            if ((unsigned char)*q > ' ')
                return q;
        }
    }
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* High bit set in each byte of w that ends a run of plain string content: '"', '\\' or a
 * control character (< 0x20, invalid in JSON strings). The lowest flagged byte is always a
 * true one (false positives only appear above it through borrows), which is all we use. */
static inline uint64_t string_stop_mask(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), bslash = w ^ (ones * '\\');
    uint64_t m = ((quote - ones) & ~quote) | ((bslash - ones) & ~bslash) | ((w - ones * 0x20) & ~w);
    return m & highs;
}

/* The first byte at or after p that may end a run of plain string content (a quote, a
 * backslash, a control character), or a position within 16 bytes of ``end`` from which the
 * caller finishes byte by byte. 16 bytes at a time with SSE2 (part of every x86-64 CPU, so no
 * runtime check is needed), else 8 at a time in a 64-bit word. */
static inline const char *skip_plain(const char *p, const char *end)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctrl = _mm_set1_epi8(0x1F);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                    _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl), v)); /* v <= 0x1F */
        unsigned m = (unsigned)_mm_movemask_epi8(stop);
        if (m)
            return p + __builtin_ctz(m);
        p += 16;
    }
#else
    while (end - p >= 8) {
        uint64_t m = string_stop_mask(load64(p));
        if (m)
            return p + first_flagged_byte(m);
        p += 8;
    }
#endif
    return p;
}

static inline int is_string_stop(unsigned char c) { return c == '"' || c == '\\' || c < 0x20; }

/* Validate the string starting at the quote p. Returns the position after the closing quote and
 * sets *has_esc when the content contains backslash escapes (then it must be decoded). */
static ALWAYS_INLINE const char *scan_string(Scan *S, const char *p, int *has_esc)
{
    const char *end = S->end;
    int esc = 0;
    p++;
    for (;;) {
        p = skip_plain(p, end);
        while (p < end && !is_string_stop((unsigned char)*p))
            p++;
        if (p >= end)
            return syntax_error(S, p, "unterminated string");
        if (*p == '"') {
            *has_esc = esc;
            return p + 1;
        }
        if (*p != '\\')
            return syntax_error(S, p, "control character in string");
        esc = 1;
        if (end - p < 2)
            return syntax_error(S, p, "unterminated string");
        switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            break;
        case 'u': {
            if (!is_hex4(p + 2, end))
                return syntax_error(S, p, "invalid \\u escape");
            /* UTF-16 surrogates must pair up (high then low) in every string, converted or
             * not, as msgspec checks them: a document is valid for both or for neither */
            unsigned cp = read_hex4(p + 2);
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return syntax_error(S, p, "lone utf-16 low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !is_hex4(p + 8, end) ||
                    (lo = read_hex4(p + 8)) < 0xDC00 || lo > 0xDFFF)
                    return syntax_error(S, p, "invalid utf-16 surrogate pair");
                p += 6;
            }
            p += 6;
            break;
        }
        default:
            return syntax_error(S, p, "invalid escape");
        }
    }
}

/* End of the JSON number at p, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, or NULL when
 * there is none. *is_float tells whether it has a fraction or an exponent. */
static ALWAYS_INLINE const char *match_number(const char *p, const char *end, int *is_float)
{
    int fl = 0;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return NULL;
    if (*p == '0')
        p++;
    else
        p = skip_digits(p, end);
    if (p < end && *p == '.') {
        fl = 1;
        if (++p >= end || !is_digit(*p))
            return NULL;
        p = skip_digits(p, end);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        fl = 1;
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
    }
    *is_float = fl;
    return p;
}

/* The literal ``word`` (true/false/null) at p, or NULL. */
static inline const char *match_literal(const char *p, const char *end, const char *word, size_t n)
{
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Skipping (validating) values                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Validate the scalar (string, number, literal) at p. Returns its end and its V_* type. */
static ALWAYS_INLINE const char *skip_scalar(Scan *S, const char *p, int *type)
{
    const char *end = S->end, *q;
    int flag = 0;
    if (p >= end)
        return syntax_error(S, p, "unexpected end of input");
    switch (*p) {
    case '"':
        q = scan_string(S, p, &flag);
        *type = flag ? V_STR_ESC : V_STR;
        return q;
    case 't':
        q = match_literal(p, end, "true", 4);
        break;
    case 'f':
        q = match_literal(p, end, "false", 5);
        break;
    case 'n':
        q = match_literal(p, end, "null", 4);
        break;
    default:
        if (!(q = match_number(p, end, &flag)))
            return syntax_error(S, p, "invalid value");
        *type = flag ? V_FLOAT : V_INT;
        return q;
    }
    *type = V_LITERAL;
    return q ? q : syntax_error(S, p, "invalid literal");
}

/* The member key at p: validate the string and the ':' after it. Returns the value's position. */
static const char *skip_key(Scan *S, const char *p)
{
    const char *end = S->end;
    int esc = 0;
    if (p >= end || *p != '"')
        return syntax_error(S, p, "expected a string key");
    if (!(p = scan_string(S, p, &esc)))
        return NULL;
    p = skip_ws(p, end);
    if (p >= end || *p != ':')
        return syntax_error(S, p, "expected ':'");
    return skip_ws(p + 1, end);
}

/* Validate the array or object at p, itself at nesting ``depth``, and everything inside it.
 * Iterative, with an explicit stack of the open containers' closing brackets, so that deep
 * nesting costs no C stack. */
static const char *skip_container(Scan *S, const char *p, int depth)
{
    const char *end = S->end;
    char closing[MAX_DEPTH + 1];
    int n = 0, type;
    for (;;) {
        /* here p is at a value (whitespace skipped) */
        if (p < end && (*p == '{' || *p == '[')) {
            if (depth + n > MAX_DEPTH)
                return syntax_error(S, p, "nesting too deep");
            closing[n++] = *p == '{' ? '}' : ']';
            p = skip_ws(p + 1, end);
            if (p < end && *p == closing[n - 1]) {
                p++; /* empty: already a complete value */
                n--;
            } else {
                if (closing[n - 1] == '}' && !(p = skip_key(S, p)))
                    return NULL;
                continue; /* at its first value */
            }
        } else if (!(p = skip_scalar(S, p, &type))) {
            return NULL;
        }
        /* after a complete value: close finished containers, or go to the next value */
        for (;;) {
            if (n == 0)
                return p;
            p = skip_ws(p, end);
            if (p < end && *p == closing[n - 1]) {
                p++;
                n--;
            } else if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                if (closing[n - 1] == '}' && !(p = skip_key(S, p)))
                    return NULL;
                break;
            } else {
                return syntax_error(S, p, closing[n - 1] == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
            }
        }
    }
}

/* Validate the value at p (whitespace already skipped) inside a container at ``depth``.
 * Returns its end; when ``span`` is given, records where it is and what type it has. */
static ALWAYS_INLINE const char *skip_value(Scan *S, const char *p, int depth, Span *span)
{
    const char *q;
    int type = V_COMPOUND;
    if (p < S->end && (*p == '{' || *p == '['))
        q = skip_container(S, p, depth + 1);
    else
        q = skip_scalar(S, p, &type);
    if (q && span)
        *span = (Span){p, q, type};
    return q;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding strings and minifying values                                                        */
/* ------------------------------------------------------------------------------------------ */

static inline char *put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Decode the content [p, q) of a string validated by scan_string into ``out`` (replacing its
 * contents) as UTF-8. Each escape is at most 6 or 12 source bytes and yields at most 4
 * bytes, so the output never exceeds the input length. */
static int decode_string(Scan *S, const char *p, const char *q, Buf *out)
{
    out->len = 0;
    if (buf_reserve(out, (size_t)(q - p)) < 0)
        return -1;
    char *o = out->data;
    while (p < q) {
        const char *bs = memchr(p, '\\', (size_t)(q - p));
        size_t run = (size_t)((bs ? bs : q) - p);
        memcpy(o, p, run);
        o += run;
        p += run;
        if (!bs)
            break;
        char c = p[1];
        p += 2;
        switch (c) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp = read_hex4(p);
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                syntax_error(S, p - 6, "lone utf-16 low surrogate");
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* a high surrogate must be followed by an escaped low one */
                uint32_t lo = q - p >= 6 && p[0] == '\\' && p[1] == 'u' ? read_hex4(p + 2) : 0;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    syntax_error(S, p - 6, "invalid utf-16 surrogate pair");
                    return -1;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            o = put_utf8(o, cp);
            break;
        }
        default: /* '"', '\\', '/' */
            *o++ = c;
        }
    }
    out->len = (size_t)(o - out->data);
    return 0;
}

/* Copy the validated value [p, q) into ``out`` (replacing its contents) without the whitespace
 * outside strings, like scan_py.minify; strings keep their raw escaped form. Outside strings,
 * valid JSON has no byte <= ' ' but whitespace, so dropping it is one comparison and no branch
 * (kernel shapes and dtypes, "[[8, 128], [128]]", are mostly short runs between spaces). */
static int minify_into(const char *p, const char *q, Buf *out)
{
    out->len = 0;
    if (buf_reserve(out, (size_t)(q - p)) < 0)
        return -1;
    char *o = out->data;
    while (p < q) {
        char c = *p++;
        *o = c;
        if (c == '"') { /* a string, copied whole up to its closing quote (it is validated) */
            o++;
            for (char d; (*o++ = d = *p++) != '"';)
                if (d == '\\')
                    *o++ = *p++; /* the escaped character, even a quote */
        } else {
            o += (unsigned char)c > ' ';
        }
    }
    out->len = (size_t)(o - out->data);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Numbers                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Powers of ten below 2**64, as integers. */
static const uint64_t POW10_INT[] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
                                     100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL,
                                     1000000000000ULL, 10000000000000ULL, 100000000000000ULL,
                                     1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
                                     1000000000000000000ULL, 10000000000000000000ULL};

/* Powers of ten that are exact doubles (10**22 is the largest). */
static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#if defined(__SIZEOF_INT128__)
/* The correctly rounded double of mant * 10**exp10 for 0 < mant < 2**64 and |exp10| <= 19,
 * in exact integer arithmetic: Kineto writes its derived floats (a memcpy's "memory bandwidth
 * (GB/s)": 11.654320987654321) with 16-17 significant digits, often past Clinger's 2**53, and
 * each of those took the C library's arbitrary-precision parser (5 % of the scan of a trace of
 * many copies).
 * The value is mant * 10**exp10 exactly (a product of two numbers below 2**64), or the quotient
 * of mant shifted to 127 bits by 10**-exp10 (below 2**64), whose remainder is the sticky bit;
 * either has at least 63 significant bits, rounded here to 53, half to even. */
static double exact_ratio_to_double(uint64_t mant, int exp10)
{
    unsigned __int128 q;
    int sticky = 0, scale = 0; /* the value is (q + a fraction if sticky) * 2**scale */
    if (exp10 >= 0) {
        q = (unsigned __int128)mant * POW10_INT[exp10];
    } else {
        int shift = 63 + __builtin_clzll(mant); /* mant << shift has 127 bits */
        unsigned __int128 n = (unsigned __int128)mant << shift;
        uint64_t d = POW10_INT[-exp10];
        q = n / d;
        sticky = n % d != 0;
        scale = -shift;
    }
    uint64_t hi = (uint64_t)(q >> 64);
    int bits = hi ? 128 - __builtin_clzll(hi) : 64 - __builtin_clzll((uint64_t)q);
    if (bits <= 53) /* an exact product that fits the mantissa */
        return (double)(uint64_t)q;
    int drop = bits - 53;
    uint64_t m = (uint64_t)(q >> drop);
    unsigned __int128 rest = q & ((((unsigned __int128)1) << drop) - 1), half = ((unsigned __int128)1) << (drop - 1);
    if (rest > half || (rest == half && (sticky || (m & 1))))
        m++; /* 2**53 at most: still exact */
    return ldexp((double)m, drop + scale);
}
#endif

/* The correctly rounded double of the JSON number [p, q) (validated), like Python's float().
 * Most numbers in traces take Clinger's fast path: a mantissa below 2**53 times or divided by
 * an exact power of ten is a single, correctly rounded operation; up to 19 digits and a power
 * of ten up to 19 either way, exact_ratio_to_double. Others go to the C library's (or Python's)
 * correctly rounded, locale-independent parser. */
static int number_to_double(const char *p, const char *q, double *out)
{
    const char *s = p;
    int neg = *s == '-';
    uint64_t mant = 0;
    int sig = 0;           /* significant digits in mant */
    long long exp10 = 0;
    s += neg;
#if FLT_EVAL_METHOD == 0
    /* the usual text, digits[.digits] with at most 19 digits in all, in two SWAR passes (as in
     * decimal_text_to_ns): durations such as 93.758 took a byte-wise loop of two tests a digit */
    const char *int_end = skip_digits(s, q), *frac = int_end, *frac_end = int_end;
    if (frac < q && *frac == '.')
        frac_end = skip_digits(++frac, q);
    if (frac_end == q && (int_end - s) + (frac_end - frac) <= 19) {
        size_t n_frac = (size_t)(frac_end - frac);
        uint64_t m = digits_value(s, (size_t)(int_end - s)) * POW10_INT[n_frac] + digits_value(frac, n_frac);
        if (m <= (1ULL << 53)) { /* n_frac <= 19: an exact power of ten */
            double d = (double)m / POW10[n_frac];
            *out = neg ? -d : d; /* 0 and -0 too: 0.0 / 10**k is +0.0 */
            return 0;
        }
    }
#endif
    for (; s < q && is_digit(*s); s++)
        if (mant || *s != '0') {
            if (++sig > 19)
                goto slow;
            mant = mant * 10 + (uint64_t)(*s - '0');
        }
    if (s < q && *s == '.')
        for (s++; s < q && is_digit(*s); s++, exp10--)
            if (mant || *s != '0') {
                if (++sig > 19)
                    goto slow;
                mant = mant * 10 + (uint64_t)(*s - '0');
            }
    if (s < q && (*s == 'e' || *s == 'E')) {
        int eneg = 0;
        long long e = 0;
        s++;
        if (*s == '+' || *s == '-')
            eneg = *s++ == '-';
        for (; s < q; s++)
            if (e < 100000)
                e = e * 10 + (*s - '0');
        exp10 += eneg ? -e : e;
    }
    if (mant == 0) {
        *out = neg ? -0.0 : 0.0;
        return 0;
    }
#if FLT_EVAL_METHOD == 0
    if (mant <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)mant;
        d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        *out = neg ? -d : d;
        return 0;
    }
#endif
#if defined(__SIZEOF_INT128__)
    if (exp10 >= -19 && exp10 <= 19) { /* mant < 10**19: the 16-17 digit doubles Kineto writes */
        double d = exact_ratio_to_double(mant, (int)exp10);
        *out = neg ? -d : d;
        return 0;
    }
#endif
slow:;
    /* strtod_l and PyOS_string_to_double want a NUL-terminated string */
    char small[64], *tmp = small;
    size_t n = (size_t)(q - p);
    if (n >= sizeof small && !(tmp = PyMem_RawMalloc(n + 1)))
        return no_memory();
    memcpy(tmp, p, n);
    tmp[n] = '\0';
#if HAVE_STRTOD_L
    if (c_numeric) {
        /* the C library's parser in the "C" locale, correctly rounded like Python's own (glibc,
         * macOS), with no GIL: a scan beside other threads would otherwise wait for the GIL
         * at every such number (a 200 MB trace has ~2,000 of them: each wait is up to the
         * 5 ms switch interval while another thread runs Python) */
        *out = strtod_l(tmp, NULL, c_numeric); /* overflow gives +-inf, as float() */
        if (tmp != small)
            PyMem_RawFree(tmp);
        return 0;
    }
#endif
    GIL_ENTER;
    double d = PyOS_string_to_double(tmp, NULL, NULL); /* overflow gives +-inf, as float() */
    int failed = d == -1.0 && PyErr_Occurred();
    GIL_LEAVE;
    if (tmp != small)
        PyMem_RawFree(tmp);
    if (failed)
        return -1;
    *out = d;
    return 0;
}

/* int(f) for kind 'i': truncation toward zero, INT_MISSING unless finite and in range. */
static inline int64_t double_to_int64(double d)
{
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0) /* false for NaN */
        return (int64_t)d;
    return INT_MISSING;
}

/* The exact value of [+-]?[0-9]+ in [p, q) (validated), INT_MISSING when beyond int64. */
static int64_t decimal_to_int64(const char *p, const char *q)
{
    int neg = 0;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    uint64_t m = 0;
    if (q - p <= 19) { /* the usual case: cannot overflow uint64 */
        m = digits_value(p, (size_t)(q - p));
        p = q;
    }
    for (; p < q; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (m >= 1844674407370955161ULL && (m > 1844674407370955161ULL || d > 5))
            return INT_MISSING; /* over 2**64 - 1 */
        m = m * 10 + d;
    }
    if (neg)
        return m <= (uint64_t)INT64_MAX ? -(int64_t)m : INT_MISSING;
    return m <= (uint64_t)INT64_MAX ? (int64_t)m : INT_MISSING;
}

/* The kind-'i' value of the JSON number [p, q). */
static int number_to_int64(const char *p, const char *q, int is_float, int64_t *out)
{
    if (!is_float) {
        *out = decimal_to_int64(p, q);
        return 0;
    }
    double d;
    if (number_to_double(p, q, &d) < 0)
        return -1;
    *out = double_to_int64(d);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Numeric strings ("2560", "0x10", " 7 ") in 'f' and 'i' fields                                */
/*                                                                                              */
/* scan_py strips the text (str.strip), tries int(s, 16) after a 0x prefix, then int(s, 10),   */
/* then float(s). Python's grammar is wide (underscores, Unicode digits and spaces, inf/nan),  */
/* so C handles only the common plain-ASCII shapes and hands everything else to those very     */
/* Python functions, which keeps the result identical.                                         */
/* ------------------------------------------------------------------------------------------ */

/* ASCII characters for which str.isspace() is true. */
static inline int is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F); }

static void trim_py_space(const char **s, size_t *n)
{
    const char *a = *s, *b = *s + *n;
    while (a < b && is_py_space((unsigned char)*a))
        a++;
    while (b > a && is_py_space((unsigned char)b[-1]))
        b--;
    *s = a;
    *n = (size_t)(b - a);
}

/* Length of the "0x" / "-0x" / "+0x" prefix (any case) of s, or 0 if it has none. */
static size_t hex_prefix_len(const char *s, size_t n)
{
    size_t sign = n > 0 && (s[0] == '-' || s[0] == '+');
    return n >= sign + 2 && s[sign] == '0' && (s[sign + 1] == 'x' || s[sign + 1] == 'X') ? sign + 2 : 0;
}

/* Exact value of the hex digits s[0:n] (n >= 1, all valid); *overflow when beyond 2**64 - 1. */
static uint64_t hex_digits_value(const char *s, size_t n, int *overflow)
{
    uint64_t m = 0;
    *overflow = 0;
    for (size_t i = 0; i < n; i++) {
        if (m >> 60)
            *overflow = 1;
        m = m << 4 | (uint64_t)hex_value(s[i]);
    }
    return m;
}

static int all_hex(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (hex_value(s[i]) < 0)
            return 0;
    return 1;
}

static int all_digits(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(s[i]))
            return 0;
    return 1;
}

/* Plain ASCII with no decimal digit: Python can read no number from it but inf / nan. */
static int ascii_without_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80 || is_digit(s[i]))
            return 0;
    return 1;
}

/* float() of an ASCII text without digits: +-inf / +-infinity / +-nan (any case), else NaN. */
static double ascii_special_float(const char *s, size_t n)
{
    double sign = 1.0;
    if (n && (s[0] == '-' || s[0] == '+')) {
        sign = s[0] == '-' ? -1.0 : 1.0;
        s++;
        n--;
    }
    char low[9];
    if (n == 0 || n > 8)
        return NAN;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    low[n] = '\0';
    if (!strcmp(low, "inf") || !strcmp(low, "infinity"))
        return sign * INFINITY;
    if (!strcmp(low, "nan"))
        return copysign(NAN, sign);
    return NAN;
}

/* A text that reads as a JSON number, optionally with a leading '+' before a digit (a subset
 * of Python's float grammar that our number parser handles). */
static int is_signed_json_number(const char *s, size_t n, int *is_float)
{
    if (n && s[0] == '+') {
        if (n < 2 || !is_digit(s[1]))
            return 0;
        s++;
        n--;
    }
    return match_number(s, s + n, is_float) == s + n;
}

/* Clear a pending ValueError (the "not a number" outcome) and return 1; 0 for other errors. */
static int clear_value_error(void)
{
    if (!PyErr_ExceptionMatches(PyExc_ValueError))
        return 0;
    PyErr_Clear();
    return 1;
}

/* The text as a Python str, stripped as str.strip() does. */
static PyObject *py_stripped(const char *s, size_t n)
{
    PyObject *u = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "replace");
    if (!u)
        return NULL;
    PyObject *t = PyObject_CallMethod(u, "strip", NULL);
    Py_DECREF(u);
    return t;
}

/* s[:2].lower() == "0x" or s[:3].lower() in ("-0x", "+0x") for a str s. */
static int py_has_hex_prefix(PyObject *t)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(t), i = 0;
    if (n > 0 && (PyUnicode_READ_CHAR(t, 0) == '-' || PyUnicode_READ_CHAR(t, 0) == '+'))
        i = 1;
    return n >= i + 2 && PyUnicode_READ_CHAR(t, i) == '0' &&
           (PyUnicode_READ_CHAR(t, i + 1) == 'x' || PyUnicode_READ_CHAR(t, i + 1) == 'X');
}

/* scan_py.to_float of a string, through Python: float(int(s, 16)) or float(s). */
static int py_text_to_float(const char *s, size_t n, double *out)
{
    PyObject *t = py_stripped(s, n), *num;
    if (!t)
        return -1;
    *out = NAN;
    if (py_has_hex_prefix(t)) {
        if ((num = PyLong_FromUnicodeObject(t, 16))) {
            *out = PyLong_AsDouble(num);
            Py_DECREF(num);
            if (*out == -1.0 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                    goto fail;
                PyErr_Clear(); /* scan_py raises here; +-inf is the natural value */
                *out = PyUnicode_READ_CHAR(t, 0) == '-' ? -INFINITY : INFINITY;
            }
        } else if (!clear_value_error()) {
            goto fail;
        }
    } else if ((num = PyFloat_FromString(t))) {
        *out = PyFloat_AS_DOUBLE(num);
        Py_DECREF(num);
    } else if (!clear_value_error()) {
        goto fail;
    }
    Py_DECREF(t);
    return 0;
fail:
    Py_DECREF(t);
    return -1;
}

/* scan_py._parse_int_text of a string, through Python: int(s, 16), int(s, 10), int(float(s)). */
static int py_text_to_int(const char *s, size_t n, int64_t *out)
{
    PyObject *t = py_stripped(s, n), *num = NULL;
    if (!t)
        return -1;
    *out = INT_MISSING;
    if (py_has_hex_prefix(t) && !(num = PyLong_FromUnicodeObject(t, 16)) && !clear_value_error())
        goto fail;
    if (!num && !(num = PyLong_FromUnicodeObject(t, 10)) && !clear_value_error())
        goto fail;
    if (num) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(num, &overflow);
        Py_DECREF(num);
        if (v == -1 && PyErr_Occurred())
            goto fail;
        if (!overflow)
            *out = v; /* INT64_MIN itself is INT_MISSING either way */
    } else if ((num = PyFloat_FromString(t))) {
        *out = double_to_int64(PyFloat_AS_DOUBLE(num));
        Py_DECREF(num);
    } else if (!clear_value_error()) {
        goto fail;
    }
    Py_DECREF(t);
    return 0;
fail:
    Py_DECREF(t);
    return -1;
}

/* Kind 'f' of a decoded JSON string s[0:n]. */
static int text_to_float(const char *s, size_t n, double *out)
{
    int is_float;
    trim_py_space(&s, &n);
    size_t hp = hex_prefix_len(s, n);
    if (hp) {
        /* up to 13 hex digits (52 bits) the int converts to double exactly */
        if (n - hp <= 13 && all_hex(s + hp, n - hp)) {
            int overflow;
            int64_t v = (int64_t)hex_digits_value(s + hp, n - hp, &overflow);
            *out = (double)(s[0] == '-' ? -v : v); /* an int has no -0 */
            return 0;
        }
    } else if (is_signed_json_number(s, n, &is_float)) {
        return number_to_double(s + (s[0] == '+'), s + n, out);
    } else if (ascii_without_digits(s, n)) {
        *out = ascii_special_float(s, n);
        return 0;
    }
    GIL_ENTER;
    int rc = py_text_to_float(s, n, out);
    GIL_LEAVE;
    return rc;
}

/* Kind 'i' of a decoded JSON string s[0:n]. */
static int text_to_int(const char *s, size_t n, int64_t *out)
{
    int is_float;
    trim_py_space(&s, &n);
    size_t hp = hex_prefix_len(s, n);
    if (hp) {
        if (all_hex(s + hp, n - hp)) {
            int overflow;
            uint64_t m = hex_digits_value(s + hp, n - hp, &overflow);
            if (overflow || m > (uint64_t)INT64_MAX)
                *out = INT_MISSING;
            else
                *out = s[0] == '-' ? -(int64_t)m : (int64_t)m;
            return 0;
        }
    } else if (n && all_digits(s + (s[0] == '-' || s[0] == '+'), n - (s[0] == '-' || s[0] == '+'))) {
        *out = decimal_to_int64(s, s + n);
        return 0;
    } else if (is_signed_json_number(s, n, &is_float)) {
        return number_to_int64(s + (s[0] == '+'), s + n, 1, out);
    } else if (ascii_without_digits(s, n)) {
        *out = INT_MISSING; /* at best inf or nan, which are not integers */
        return 0;
    }
    GIL_ENTER;
    int rc = py_text_to_int(s, n, out);
    GIL_LEAVE;
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Kind 'n': exact integer nanoseconds of a decimal µs value                                    */
/*                                                                                              */
/* scan_py computes int(Decimal(text) * 1000). With at most 19 significant digits the value is */
/* mantissa * 10**e exactly, and so is its truncation in integer arithmetic; longer texts      */
/* (where Decimal's 28-digit context rounding could matter) go to Python's decimal module.     */
/* ------------------------------------------------------------------------------------------ */

/* trunc(value * 1000) of the decimal text [p, q): [+-]?digits(.digits)?([eE][+-]?digits)?,
 * validated. Returns 1 with *out set (INT_MISSING beyond int64), or 0 when the text has more
 * than 19 significant digits and the caller must ask Python. */
static int decimal_text_to_ns(const char *p, const char *q, int64_t *out)
{
    int neg = 0, sig = 0;
    uint64_t mant = 0, mag;
    long long e10 = 3; /* µs -> ns */
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    /* the usual text, digits[.digits] with at most 19 digits in all, in two SWAR passes */
    const char *int_end = skip_digits(p, q), *frac = int_end, *frac_end = int_end;
    if (frac < q && *frac == '.')
        frac_end = skip_digits(++frac, q);
    if (frac_end == q && (int_end - p) + (frac_end - frac) <= 19) {
        size_t n_frac = (size_t)(frac_end - frac);
        mant = digits_value(p, (size_t)(int_end - p)) * POW10_INT[n_frac] + digits_value(frac, n_frac);
        e10 -= (long long)n_frac;
        goto scale;
    }
    for (; p < q && is_digit(*p); p++)
        if (mant || *p != '0') {
            if (++sig > 19)
                return 0;
            mant = mant * 10 + (uint64_t)(*p - '0');
        }
    if (p < q && *p == '.')
        for (p++; p < q && is_digit(*p); p++, e10--)
            if (mant || *p != '0') {
                if (++sig > 19)
                    return 0;
                mant = mant * 10 + (uint64_t)(*p - '0');
            }
    if (p < q && (*p == 'e' || *p == 'E')) {
        int eneg = 0;
        long long e = 0;
        p++;
        if (*p == '+' || *p == '-')
            eneg = *p++ == '-';
        for (; p < q; p++)
            if (e < 100000)
                e = e * 10 + (*p - '0');
        e10 += eneg ? -e : e;
    }
scale:
    if (e10 >= 0) {
        for (mag = mant; e10 > 0 && mag; e10--) {
            if (mag > (uint64_t)INT64_MAX / 10) {
                *out = INT_MISSING;
                return 1;
            }
            mag *= 10;
        }
        if (mag > (uint64_t)INT64_MAX) {
            *out = INT_MISSING;
            return 1;
        }
    } else {
        mag = e10 < -19 ? 0 : mant / POW10_INT[-e10]; /* truncation toward zero */
    }
    *out = neg ? -(int64_t)mag : (int64_t)mag;
    return 1;
}

/* int(value * 1000) for a Decimal value, INT_MISSING when not finite or beyond int64. */
static int py_decimal_value_to_ns(PyObject *value, int64_t *out)
{
    PyObject *finite = PyObject_CallMethod(value, "is_finite", NULL);
    if (!finite)
        return -1;
    int is_finite = PyObject_IsTrue(finite);
    Py_DECREF(finite);
    if (is_finite <= 0)
        return is_finite; /* -1: error; 0: inf / nan, INT_MISSING */
    PyObject *thousand = PyLong_FromLong(1000), *product = NULL, *ns = NULL;
    if (thousand && (product = PyNumber_Multiply(value, thousand)))
        ns = PyNumber_Long(product); /* truncates toward zero */
    Py_XDECREF(thousand);
    Py_XDECREF(product);
    if (!ns)
        return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(ns, &overflow);
    Py_DECREF(ns);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (!overflow)
        *out = v; /* INT64_MIN itself is INT_MISSING either way */
    return 0;
}

/* int(Decimal(t) * 1000) through Python's decimal module (exactly scan_py's computation, in the
 * current decimal context); INT_MISSING for what Decimal rejects (InvalidOperation), a
 * non-finite value, or an exponent it cannot scale (Overflow). */
static int py_decimal_to_ns(PyObject *t, int64_t *out)
{
    PyObject *mod = PyImport_ImportModule("decimal"), *cls = NULL, *exc = NULL, *value = NULL;
    int rc = -1;
    *out = INT_MISSING;
    if (!mod)
        return -1;
    if ((cls = PyObject_GetAttrString(mod, "Decimal")) && (exc = PyObject_GetAttrString(mod, "DecimalException"))) {
        if ((value = PyObject_CallOneArg(cls, t)))
            rc = py_decimal_value_to_ns(value, out);
        if (rc < 0 && PyErr_ExceptionMatches(exc)) {
            PyErr_Clear();
            *out = INT_MISSING;
            rc = 0;
        }
    }
    Py_DECREF(mod);
    Py_XDECREF(cls);
    Py_XDECREF(exc);
    Py_XDECREF(value);
    return rc;
}

/* The kind-'n' value of the JSON number [p, q). */
static int number_to_ns(const char *p, const char *q, int64_t *out)
{
    if (decimal_text_to_ns(p, q, out))
        return 0;
    int rc = -1;
    GIL_ENTER;
    PyObject *t = PyUnicode_FromStringAndSize(p, q - p);
    if (t) {
        rc = py_decimal_to_ns(t, out);
        Py_DECREF(t);
    }
    GIL_LEAVE;
    return rc;
}

/* scan_py.to_ns of a string, through Python: int(s, 16) * 1000 or int(Decimal(s) * 1000). */
static int py_text_to_ns(const char *s, size_t n, int64_t *out)
{
    PyObject *t = py_stripped(s, n);
    int rc = 0;
    if (!t)
        return -1;
    *out = INT_MISSING;
    if (py_has_hex_prefix(t)) {
        PyObject *num = PyLong_FromUnicodeObject(t, 16);
        if (num) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(num, &overflow);
            Py_DECREF(num);
            if (v == -1 && PyErr_Occurred())
                rc = -1;
            else if (!overflow && v >= -(INT64_MAX / 1000) && v <= INT64_MAX / 1000)
                *out = v * 1000;
        } else if (!clear_value_error()) {
            rc = -1;
        }
    } else {
        rc = py_decimal_to_ns(t, out);
    }
    Py_DECREF(t);
    return rc;
}

/* Kind 'n' of a decoded JSON string s[0:n]. */
static int text_to_ns(const char *s, size_t n, int64_t *out)
{
    int is_float;
    trim_py_space(&s, &n);
    size_t hp = hex_prefix_len(s, n);
    if (hp) {
        if (all_hex(s + hp, n - hp)) {
            int overflow;
            uint64_t m = hex_digits_value(s + hp, n - hp, &overflow);
            if (overflow || m > (uint64_t)INT64_MAX / 1000)
                *out = INT_MISSING;
            else
                *out = (s[0] == '-' ? -(int64_t)m : (int64_t)m) * 1000;
            return 0;
        }
    } else if (is_signed_json_number(s, n, &is_float)) {
        if (decimal_text_to_ns(s, s + n, out))
            return 0;
    } else if (ascii_without_digits(s, n)) {
        *out = INT_MISSING; /* at best infinity or nan */
        return 0;
    }
    GIL_ENTER;
    int rc = py_text_to_ns(s, n, out);
    GIL_LEAVE;
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Converting a remembered value to its kind                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The text cache. A kind-'s' value is mostly one of a few thousand texts: event names and
 * categories, and the shapes and dtypes of an operator's inputs as arrays ("Input Dims":
 * [[1024, 8, 96], []], "Input type": ["float", "Scalar"]) on a third of a Kineto trace's
 * events. Each took a validating walk (scan_string, skip_container), for arrays a minifying
 * copy, and a hash and a probe of the string table. The cache maps the raw bytes of a value
 * already converted to its code, so a value seen before costs one hash of the 32 bytes where
 * it starts and one comparison (the 50 MB sample of the generated trace: 614M -> 548M
 * instructions for the whole scan; numbers too: 501M -> 473M; 32 bytes instead of 16 choosing
 * the entry, as input shapes share their first 16: 473M -> 455M).
 *
 * Skipping the validation is exact: a string ends at its first unescaped quote and an array or
 * an object at its matching bracket, which the parser finds without looking past them, so
 * bytes equal to a complete value that was valid are that same valid value, ending at the same
 * place. A number (pid and tid are kind 's': their texts are interned) may go on past the
 * cached text ("12" is a prefix of "123", "12.5", "12e3"): a hit needs the byte after it to be
 * none of a digit, '.', 'e', 'E', the only ones that continue a complete number. Nesting depth
 * does not matter: a text of at most 80 bytes nests at most 40 deep, far from MAX_DEPTH.
 * Values are converted when their event ends (see the header): the cache is filled then, and a
 * hit needs no interning, so the string table and its order are what they would be without
 * it. The entry is chosen by a string's own bytes where it ends within 16 (with SSE2), else by
 * the first 32 bytes at a string, array or object and the first 16 at a number, whatever they
 * hold: for a short value they include what follows it, mostly the same next key, but not in a
 * flow event ("ph":"f","id":2,"pid":...: each id its own entry, every "f" a miss and a store
 * overwriting another text; 18,772 misses of ph in 68,692 events of the V100 trace written
 * compact, 5 by its own bytes, the scan 10.4-10.8 ms -> 10.0-10.4). Only 16 for a number: pid and
 * tid are short numbers and a timestamp follows tid ("tid": 7, "ts": 4778867745254.634), whose
 * digits in the entry's 32 bytes made each tid a miss and a store in an entry of its own,
 * overwriting one text every event (the triton example's 1 GB growth scanned in 0.88-0.89 CPU s
 * instead of 0.93-0.96, the V100 trace's in 0.89-0.92 instead of 0.93-1.00). */
static size_t text_cache_mask = TEXT_CACHE_SLOTS - 1; /* fewer slots for tests: _set_text_cache_slots */

static inline size_t text_cache_slot(const char *p)
{
    uint64_t w0 = load64(p), w1 = load64(p + 8);
#if defined(__SSE2__)
    if (*p == '"') {
        uint32_t quotes = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8('"'))) & ~1u;
        if (quotes) { /* a string of at most 14 bytes: its own bytes alone */
            unsigned n = (unsigned)__builtin_ctz(quotes) + 1; /* 2..16 */
            if (n <= 8) {
                w0 &= n == 8 ? ~0ULL : (1ULL << (8 * n)) - 1;
                w1 = 0;
            } else {
                w1 &= n == 16 ? ~0ULL : (1ULL << (8 * (n - 8))) - 1;
            }
            return (size_t)(((w0 * PRIME1) ^ (w1 * PRIME2)) >> 40) & text_cache_mask;
        }
    }
#endif
    uint64_t h = (w0 * PRIME1) ^ (w1 * PRIME2);
    if (*p == '"' || *p == '[' || *p == '{')
        h ^= rotl64(load64(p + 16) * PRIME1 ^ load64(p + 24) * PRIME2, 29);
    return (size_t)(h >> 40) & text_cache_mask;
}

/* Remember that the value [p, q) (a string, array or object) converts to ``code``. */
static void text_cache_store(Scan *S, const char *p, const char *q, int32_t code)
{
    size_t n = (size_t)(q - p);
    if (n > TEXT_CACHE_MAX || S->end - p < TEXT_CACHE_KEY)
        return;
    CachedText *e = &S->text_cache[text_cache_slot(p)];
    memcpy(e->text, p, n);
    e->len = (uint8_t)n;
    e->code = code;
}

/* The value at p as a V_CODE span when the cache knows it (a string, array or object); 0 if not. */
static inline int text_cache_lookup(Scan *S, const char *p, Span *span)
{
    if (S->end - p < TEXT_CACHE_KEY || (*p != '[' && *p != '{' && *p != '"' && *p != '-' && !is_digit(*p)))
        return 0;
    const CachedText *e = &S->text_cache[text_cache_slot(p)];
    size_t n = e->len;
    if (n == 0 || (size_t)(S->end - p) < n || !bytes_equal(p, e->text, n))
        return 0;
    if ((*p == '-' || is_digit(*p)) && (size_t)(S->end - p) > n &&
        (is_digit(p[n]) || p[n] == '.' || p[n] == 'e' || p[n] == 'E'))
        return 0; /* a longer number: "12" is a prefix of "123" and of "12.5" */
    *span = (Span){p, p + n, V_CODE, e->code};
    return 1;
}

/* The text of a string span: its raw content, or its decoding in S->scratch. */
static int span_text(Scan *S, const Span *v, const char **s, size_t *n)
{
    if (v->type == V_STR) {
        *s = v->p + 1;
        *n = (size_t)(v->q - v->p - 2);
        return 0;
    }
    if (decode_string(S, v->p + 1, v->q - 1, &S->scratch) < 0)
        return -1;
    *s = S->scratch.data;
    *n = S->scratch.len;
    return 0;
}

static int convert_float(Scan *S, const Span *v, double *out)
{
    const char *s;
    size_t n;
    switch (v->type) {
    case V_INT:
    case V_FLOAT:
        return number_to_double(v->p, v->q, out);
    case V_STR:
    case V_STR_ESC:
        if (span_text(S, v, &s, &n) < 0)
            return -1;
        return text_to_float(s, n, out);
    default:
        *out = NAN;
        return 0;
    }
}

static int convert_int(Scan *S, const Span *v, int64_t *out)
{
    const char *s;
    size_t n;
    switch (v->type) {
    case V_INT:
    case V_FLOAT:
        return number_to_int64(v->p, v->q, v->type == V_FLOAT, out);
    case V_STR:
    case V_STR_ESC:
        if (span_text(S, v, &s, &n) < 0)
            return -1;
        return text_to_int(s, n, out);
    default:
        *out = INT_MISSING;
        return 0;
    }
}

static int convert_ns(Scan *S, const Span *v, int64_t *out)
{
    const char *s;
    size_t n;
    switch (v->type) {
    case V_INT:
    case V_FLOAT:
        return number_to_ns(v->p, v->q, out);
    case V_STR:
    case V_STR_ESC:
        if (span_text(S, v, &s, &n) < 0)
            return -1;
        return text_to_ns(s, n, out);
    default:
        *out = INT_MISSING;
        return 0;
    }
}

static int intern_text(Scan *S, const char *s, size_t n, int32_t prev, int32_t *out);

/* Kind 's': a string's text, else the minified JSON text of the value. ``prev`` is the code of
 * the column's previous value (-1 if none): columns hold long runs of one value (ph, cat, pid,
 * tid), so comparing with it first skips hashing most of the time. */
static int convert_text(Scan *S, const Span *v, int32_t prev, int32_t *out)
{
    const char *s = v->p;
    size_t n = (size_t)(v->q - v->p);
    if (v->type == V_CODE) {
        *out = v->code;
        return 0;
    }
    if (v->type == V_STR || v->type == V_STR_ESC) {
        if (span_text(S, v, &s, &n) < 0 || intern_text(S, s, n, prev, out) < 0)
            return -1;
        text_cache_store(S, v->p, v->q, *out);
        return 0;
    } else if (v->type == V_COMPOUND) {
        if (minify_into(v->p, v->q, &S->scratch) < 0)
            return -1;
        s = S->scratch.data;
        n = S->scratch.len;
        if (intern_text(S, s, n, prev, out) < 0)
            return -1;
        text_cache_store(S, v->p, v->q, *out);
        return 0;
    } /* numbers and literals contain no whitespace: the raw text is the text */
    if (intern_text(S, s, n, prev, out) < 0)
        return -1;
    if (v->type == V_INT || v->type == V_FLOAT)
        text_cache_store(S, v->p, v->q, *out);
    return 0;
}

/* The code of text s[0:n]; ``prev`` as for convert_text. */
static int intern_text(Scan *S, const char *s, size_t n, int32_t prev, int32_t *out)
{
    if (prev >= 0) {
        const InternEntry *e = &S->strings.entries[prev];
        if (e->len == n && bytes_equal(S->strings.text.data + e->off, s, n)) {
            *out = prev;
            return 0;
        }
    }
    return (*out = intern(&S->strings, s, n)) < 0 ? -1 : 0;
}

/* The kind-'i' or -'n' value of a plain JSON integer (V_INT) of at most 18 digits whose value
 * cannot overflow: 1 with *out set, else 0 (then the general conversion decides). Ids,
 * correlations and µs timestamps of up to 16 digits are nearly all integers this small: the
 * general path (decimal_to_int64, decimal_text_to_ns: sign, fraction and exponent handling,
 * a scaling loop with overflow checks) cost 65 and 170 instructions per value, this ~25. */
static ALWAYS_INLINE int small_int_value(const Span *v, char kind, int64_t *out)
{
    const char *p = v->p;
    int neg = *p == '-';
    size_t n = (size_t)(v->q - p) - (size_t)neg;
    if (n > 18)
        return 0;
    uint64_t m = digits_value(p + neg, n); /* below 10**18: fits int64 */
    if (kind == 'n') {
        if (m > (uint64_t)INT64_MAX / 1000)
            return 0;
        m *= 1000; /* µs -> ns, exact */
    }
    *out = neg ? -(int64_t)m : (int64_t)m;
    return 1;
}

/* Append the value of ``v`` (NULL: missing) converted to ``kind`` to column ``col``. */
static ALWAYS_INLINE int append_value(Scan *S, char kind, const Span *v, Buf *col)
{
    if (v && v->type == V_READY)
        return buf_put(col, &v->ready, 8); /* read_number's value, of this column's kind */
    if (kind == 'f') {
        double d = NAN;
        if (v && v->type == V_INT && v->q - v->p <= 15) { /* a plain integer below 2**53: exact */
            int neg = *v->p == '-';
            d = (double)digits_value(v->p + neg, (size_t)(v->q - v->p - neg));
            return buf_put_f64(col, neg ? -d : d); /* "-0" is -0.0, as float() gives */
        }
        if (v && convert_float(S, v, &d) < 0)
            return -1;
        return buf_put_f64(col, d);
    }
    if (kind == 'i' || kind == 'n') {
        int64_t i = INT_MISSING;
        if (v && v->type == V_INT && small_int_value(v, kind, &i))
            return buf_put_i64(col, i);
        if (v && (kind == 'i' ? convert_int(S, v, &i) : convert_ns(S, v, &i)) < 0)
            return -1;
        return buf_put_i64(col, i);
    }
    int32_t code = CODE_MISSING, prev = CODE_MISSING;
    if (v && v->type == V_CODE)
        return buf_put_i32(col, v->code); /* from the text cache: the most common case */
    if (col->len >= sizeof prev)
        memcpy(&prev, col->data + col->len - sizeof prev, sizeof prev);
    if (v && convert_text(S, v, prev, &code) < 0)
        return -1;
    return buf_put_i32(col, code);
}

/* ------------------------------------------------------------------------------------------ */
/* Events                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* The number at p of a field of kind 'n', 'f' or 'i' (a timestamp, a duration, an id), in a
 * container at ``depth``: found and converted in one pass while its digits are at hand, as a
 * V_READY span. The usual text, -?digits[.digits] with at most 19 digits and no exponent (an
 * 'i' without a fraction and of at most 18 digits), is exactly what the first paths of
 * decimal_text_to_ns, number_to_double and small_int_value convert, with the same results;
 * anything else (an exponent, more digits, a value beyond int64 or 2**53, invalid text) is only
 * validated here (skip_value) and converted when the event ends, as before. Each event's ts,
 * dur and ids found their digits twice, to validate and then to convert: the V100 trace's
 * 11.8 MB written compact scanned in 10.2-10.4 ms, now 8.8-9.0 (its ts have a fraction,
 * "ts":1712195495519764.0), as Kineto wrote it 10.9 -> 9.7-9.8, the RTX 2080 Ti trace's 25.8
 * MB 17.9-18.3 -> 16.5-17.0 (skip_digits and digits_value always inlined, part of it). */
static ALWAYS_INLINE const char *read_number(Scan *S, const char *p, int depth, char kind, Span *span)
{
    const char *end = S->end, *s = p < end && *p == '-' ? p + 1 : p, *int_end, *frac, *frac_end;
    if (s >= end || !is_digit(*s))
        goto general;
    int_end = skip_digits(s, end);
    if (*s == '0' && int_end - s > 1)
        goto general; /* a leading zero (invalid) */
    frac = frac_end = int_end;
    if (int_end < end && *int_end == '.') {
        frac = int_end + 1;
        frac_end = skip_digits(frac, end);
        if (frac_end == frac)
            goto general;
    }
    size_t n_int = (size_t)(int_end - s), n_frac = (size_t)(frac_end - frac);
    if (n_int + n_frac > 19 || (frac_end < end && (*frac_end == 'e' || *frac_end == 'E')))
        goto general;
    int neg = *p == '-';
    if (kind == 'i') {
        if (frac != int_end || n_int > 18) /* a fraction, or a value that may pass int64 */
            goto general;
        int64_t v = (int64_t)digits_value(s, n_int); /* below 10**18 */
        *span = (Span){p, frac_end, V_READY, 0, {.i = neg ? -v : v}};
        return frac_end;
    }
    uint64_t m = digits_value(s, n_int) * POW10_INT[n_frac] + digits_value(frac, n_frac); /* < 10**19 */
    if (kind == 'n') {
        uint64_t mag;
        if (n_frac <= 3) {
            uint64_t scale = POW10_INT[3 - n_frac];
            if (m > (uint64_t)INT64_MAX / scale)
                goto general; /* beyond int64 */
            mag = m * scale;
        } else {
            mag = m / POW10_INT[n_frac - 3]; /* truncation toward zero */
        }
        *span = (Span){p, frac_end, V_READY, 0, {.i = neg ? -(int64_t)mag : (int64_t)mag}};
        return frac_end;
    }
#if FLT_EVAL_METHOD == 0
    if (m <= (1ULL << 53)) { /* n_frac <= 19: an exact power of ten, one correctly rounded division */
        double d = (double)m / POW10[n_frac];
        *span = (Span){p, frac_end, V_READY, 0, {.f = neg ? -d : d}};
        return frac_end;
    }
#endif
general:
    return skip_value(S, p, depth, span);
}

/* Forget the args seen so far in this event (a later duplicate "args" key replaces them). */
static void clear_args(Scan *S)
{
    for (Py_ssize_t i = 0; i < S->n_touched; i++)
        S->arg_span[S->touched[i]].p = NULL;
    S->n_touched = 0;
}

/* Convert the current event's remembered values into the columns and reset for the next one. */
static int finish_event(Scan *S)
{
    for (Py_ssize_t k = 0; k < S->top.n; k++) {
        Span *v = &S->top_span[k];
        if (append_value(S, S->top.fields[k].kind, v->p ? v : NULL, &S->top_cols[k]) < 0)
            return -1;
        v->p = NULL;
    }
    for (Py_ssize_t i = 0; i < S->n_touched; i++) {
        int k = S->touched[i];
        if (buf_put_i32(&S->arg_rows[k], (int32_t)S->n_events) < 0 ||
            append_value(S, S->arg.fields[k].kind, &S->arg_span[k], &S->arg_vals[k]) < 0)
            return -1;
    }
    clear_args(S);
    S->n_events++;
    return 0;
}

/* Read the member key at p (expecting a string), then the ':'. Returns the position of the
 * value (whitespace skipped) and the key's decoded text in *key / *len. */
static const char *read_key(Scan *S, const char *p, const char **key, size_t *len)
{
    const char *end = S->end, *q;
    int esc = 0;
    if (p >= end || *p != '"')
        return syntax_error(S, p, "expected a string key");
    if (!(q = scan_string(S, p, &esc)))
        return NULL;
    if (esc) {
        if (decode_string(S, p + 1, q - 1, &S->key_buf) < 0)
            return NULL;
        *key = S->key_buf.data;
        *len = S->key_buf.len;
    } else {
        *key = p + 1;
        *len = (size_t)(q - p - 2);
    }
    q = skip_ws(q, end);
    if (q >= end || *q != ':')
        return syntax_error(S, q, "expected ':'");
    return skip_ws(q + 1, end);
}

/* The entry of the plain key ``key[0:len]`` (len < KEY_MEMO_LEN) in ``memo``, added when new;
 * KEY_UNKNOWN when the memo is full. ``compact``: the key's first occurrence has its value
 * right after the ':' (no space), so its pattern has none either. A file is written with one
 * spacing throughout; the spaced pattern never matches compact text (every key of a compact file
 * took the byte-wise path: its scan 24-27 % slower than that of the same events spaced), and a
 * compact pattern still matches spaced text (the space is skipped as whitespace after it). */
static int memo_entry(KeyMemo *memo, const char *key, size_t len, int field, char kind, int compact)
{
    if (memo->n == 0)
        memo->n = 2; /* KEY_START and KEY_UNKNOWN */
    size_t i = key_hash(key, len) & (KEY_MEMO_HASH - 1);
    for (int e; (e = memo->index[i]) != 0; i = (i + 1) & (KEY_MEMO_HASH - 1)) {
        const MemoKey *m = &memo->keys[e];
        if (m->len == len + 1 && bytes_equal(m->text, key, len))
            return e;
    }
    if (memo->n == KEY_MEMO_KEYS)
        return KEY_UNKNOWN;
    MemoKey *m = &memo->keys[memo->n];
    memcpy(m->text, key, len);
    m->text[len] = '"';
    m->len = (uint8_t)(len + 1);
    m->field = (int16_t)field;
    m->kind = kind;
    m->is_args = len == 4 && memcmp(key, "args", 4) == 0;
    size_t plen = len + (compact ? 3 : 4); /* quote, key, quote, ':'[, ' '] */
    memset(m->pattern, 0, sizeof m->pattern);
    m->pattern_mask = 0;
    m->pattern_len = (uint8_t)plen;
    if (plen <= KEY_PATTERN) {
        m->pattern[0] = '"';
        memcpy(m->pattern + 1, key, len);
        memcpy(m->pattern + 1 + len, compact ? "\":" : "\": ", compact ? 2 : 3);
        m->pattern_mask = plen == 32 ? 0xFFFFFFFFu : (1u << plen) - 1;
    }
    memo->index[i] = (uint8_t)memo->n;
    return memo->n++;
}

/* The key ``before->next[j]`` followed ``before`` again: it moves one place ahead, so the
 * followers stay ordered by how often they come (a new one enters first, see read_key_memo)
 * and the usual one is compared first. Kineto's event kinds order their keys differently, so
 * a key can have three or four followers ("ph" is followed by "cat", "id" or "s"; "name" by
 * "pid", "bp" or "ph"). Two remembered followers, the more recent one first, missed 73,000 of
 * 719,000 keys of the triton example (each a string validation and a hash probe) and compared
 * 1.09 M predictions; four, ordered by use: 50 misses and 0.98 M comparisons (a simulation of
 * both on 15 MB of it; on five other kinds of trace 8-23 % fewer comparisons, on the CUDA-graph
 * trace 7 % more; four in the order of their last miss took more instructions than two on six of
 * seven kinds). */
static inline void follower_seen(MemoKey *before, int j)
{
    if (j > 0) {
        uint8_t e = before->next[j];
        before->next[j] = before->next[j - 1];
        before->next[j - 1] = e;
    }
}

/* read_key for a member of an object whose keys are looked up in ``map`` and remembered in
 * ``memo``: gives the key's field index, its kind (remembered with the key: the field map's
 * entry was one more load before each value's dispatch; the scans of five real traces 2-4 %
 * faster in 4 alternating pairs, the V100 trace's 11.8 MB written compact 9.0-9.4 -> 8.6-8.9
 * ms; whole 200 MB loads within their noise) and whether it is "args". ``*prev``: the memo
 * entry of the object's previous key (KEY_START before the first), updated to this key's. */
static ALWAYS_INLINE const char *read_key_memo(Scan *S, const char *p, const FieldMap *map, KeyMemo *memo, uint8_t *prev,
                                               int *field, int *is_args, char *kind)
{
    MemoKey *before = &memo->keys[*prev];
#if defined(__SSE2__)
    /* The predicted keys compared with the text in two 16-byte comparisons each, the ': ' after
     * the key included, instead of a byte-wise comparison and then the separator's three tests:
     * keys took a sixth of all instructions of the scan of a Kineto trace, now a third of that.
     * Keys that do not fit 32 bytes, other spacing and the last 32 bytes of the buffer take the
     * general path below. */
    if (LIKELY(S->end - p >= KEY_PATTERN)) {
        __m128i lo = _mm_loadu_si128((const __m128i *)p), hi = _mm_loadu_si128((const __m128i *)(p + 16));
        for (int j = 0; j < KEY_NEXT; j++) {
            const MemoKey *m = &memo->keys[before->next[j]];
            __m128i want_lo = _mm_loadu_si128((const __m128i *)m->pattern);
            __m128i want_hi = _mm_loadu_si128((const __m128i *)(m->pattern + 16));
            uint32_t equal = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, want_lo)) |
                             (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, want_hi)) << 16;
            if (m->pattern_mask && (~equal & m->pattern_mask) == 0) { /* KEY_START/UNKNOWN: mask 0 */
                *field = m->field;
                *kind = m->kind;
                *is_args = m->is_args;
                *prev = before->next[j];
                follower_seen(before, j);
                return skip_ws(p + m->pattern_len, S->end);
            }
        }
    }
#endif
    for (int j = 0; j < KEY_NEXT; j++) {
        const MemoKey *m = &memo->keys[before->next[j]];
        if (before->next[j] && S->end - p > m->len && *p == '"' && bytes_equal(p + 1, m->text, m->len)) {
            const char *end = S->end, *q = p + 1 + m->len;
            *field = m->field;
            *kind = m->kind;
            *is_args = m->is_args;
            *prev = before->next[j];
            follower_seen(before, j);
            if (end - q >= 3 && q[0] == ':' && q[1] == ' ' && (unsigned char)q[2] > ' ') /* as Kineto writes it */
                return q + 2;
            q = skip_ws(q, end);
            if (q >= end || *q != ':')
                return syntax_error(S, q, "expected ':'");
            return skip_ws(q + 1, end);
        }
    }
    const char *key;
    size_t len;
    const char *q = read_key(S, p, &key, &len);
    if (!q)
        return NULL;
    *field = fieldmap_find(map, key, len);
    *kind = *field >= 0 ? map->fields[*field].kind : 0;
    *is_args = len == 4 && memcmp(key, "args", 4) == 0;
    int e = KEY_UNKNOWN;
    if (key == p + 1 && len < KEY_MEMO_LEN) /* no escapes: the raw bytes are the key */
        e = memo_entry(memo, key, len, *field, *kind, q == key + len + 2); /* '"', ':', then the value */
    if (e != KEY_UNKNOWN && before->next[0] != e) {
        memmove(before->next + 1, before->next, KEY_NEXT - 1);
        before->next[0] = (uint8_t)e;
    }
    *prev = (uint8_t)e;
    return q;
}

/* After a member's value: past a ',' (*done = 0) or the closing '}' (*done = 1). */
static inline const char *after_member(Scan *S, const char *p, int *done)
{
    const char *end = S->end;
    if (end - p >= 3 && *p == ',') { /* how Kineto writes it (', "'), or a compact writer (',"') */
        if (p[1] == ' ' && p[2] == '"') {
            *done = 0;
            return p + 2;
        }
        if (p[1] == '"') {
            *done = 0;
            return p + 1;
        }
    }
    p = skip_ws(p, end);
    if (p < end && *p == ',') {
        *done = 0;
        return skip_ws(p + 1, end);
    }
    if (p < end && *p == '}') {
        *done = 1;
        return p + 1;
    }
    return syntax_error(S, p, "expected ',' or '}'");
}

/* The event's "args" object at p ('{', nesting depth 3): remember the wanted keys' values. */
static const char *parse_args(Scan *S, const char *p)
{
    int done = 0;
    p = skip_ws(p + 1, S->end);
    if (p < S->end && *p == '}')
        return p + 1;
    for (uint8_t prev = KEY_START; !done;) {
        int k, is_args;
        char kind;
        if (!(p = read_key_memo(S, p, &S->arg, &S->arg_memo, &prev, &k, &is_args, &kind)))
            return NULL;
        if (k >= 0 && !S->arg_span[k].p)
            S->touched[S->n_touched++] = (int16_t)k; /* first time this event: one row */
        if (kind == 's' && text_cache_lookup(S, p, &S->arg_span[k]))
            p = S->arg_span[k].q; /* a text converted before (see text_cache_lookup) */
        else if (k >= 0 && kind != 's') /* 'n', 'f' or 'i' */
            p = read_number(S, p, 3, kind, &S->arg_span[k]);
        else
            p = skip_value(S, p, 3, k >= 0 ? &S->arg_span[k] : NULL);
        if (!p || !(p = after_member(S, p, &done)))
            return NULL;
    }
    return p;
}

/* The event object at p ('{', nesting depth 2): remember the wanted top-level values and
 * parse "args". */
static const char *parse_event(Scan *S, const char *p)
{
    int done = 0;
    p = skip_ws(p + 1, S->end);
    if (p < S->end && *p == '}')
        return p + 1;
    for (uint8_t prev = KEY_START; !done;) {
        int k, is_args;
        char kind;
        if (!(p = read_key_memo(S, p, &S->top, &S->top_memo, &prev, &k, &is_args, &kind)))
            return NULL;
        Span *span = k >= 0 ? &S->top_span[k] : NULL;
        if (is_args) {
            const char *v = p;
            clear_args(S); /* the last "args" wins, even when it is not an object */
            if (p < S->end && *p == '{') {
                if ((p = parse_args(S, p)) && span)
                    *span = (Span){v, p, V_COMPOUND};
            } else {
                p = skip_value(S, p, 2, span);
            }
        } else if (kind == 's' && text_cache_lookup(S, p, span)) {
            p = span->q; /* a text converted before (see text_cache_lookup) */
        } else if (k >= 0 && kind != 's') { /* 'n', 'f' or 'i' */
            p = read_number(S, p, 2, kind, span);
        } else {
            p = skip_value(S, p, 2, span);
        }
        if (!p || !(p = after_member(S, p, &done)))
            return NULL;
    }
    return p;
}

#define PRESIZE_AFTER 4096 /* events scanned before the columns are sized for the whole array */

/* Reserve room in ``b`` for ``count`` more values of ``size`` bytes, if memory allows. */
static void reserve_values(Buf *b, double count, size_t size)
{
    if (count < 1 || count * (double)size > (double)(SIZE_MAX / 4))
        return;
    if (buf_reserve(b, (size_t)count * size) < 0) {
        GIL_ENTER;
        PyErr_Clear(); /* only a hint: the columns still grow by doubling */
        GIL_LEAVE;
    }
}

/* Size every column for the whole events array, extrapolated from the first events: the bytes
 * they took and how many carried each args key, plus 1/16. Growing from small by doubling
 * instead copies each column about once more in total (realloc moves a block it cannot extend),
 * page-faulting fresh memory for every copy; a reserved page that is never written is never
 * resident, so an estimate too high costs address space, not memory, and the columns are
 * trimmed to their length at the end. ``start``: the array's '['; ``p``: where scanning is. */
static void presize_columns(Scan *S, const char *start, const char *p)
{
    double n = (double)S->n_events, more = n * (double)(S->end - p) / (double)(p - start) * 1.0625;
    for (Py_ssize_t k = 0; k < S->top.n; k++)
        reserve_values(&S->top_cols[k], more, S->top.fields[k].kind == 's' ? 4 : 8);
    for (Py_ssize_t k = 0; k < S->arg.n; k++) {
        double share = (double)(S->arg_rows[k].len / ROWS_BYTES) / n; /* of the events, those with the key */
        reserve_values(&S->arg_rows[k], more * share, ROWS_BYTES);
        reserve_values(&S->arg_vals[k], more * share, S->arg.fields[k].kind == 's' ? 4 : 8);
    }
}

/* The array of events at p ('['; itself at nesting depth 1, wherever it is in the buffer, so
 * that scan and scan_document nest the same). Returns the position after its ']'. */
static const char *parse_events(Scan *S, const char *p)
{
    const char *end = S->end, *start = p;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']')
        return p + 1;
    for (;;) {
        feed_ready(S, p);
        /* non-object elements are events with every field missing */
        p = p < end && *p == '{' ? parse_event(S, p) : skip_value(S, p, 1, NULL);
        if (!p || finish_event(S) < 0)
            return NULL;
        if (UNLIKELY(S->n_events > MAX_EVENTS)) {
            GIL_ENTER;
            PyErr_Format(PyExc_ValueError, "more than %d events in one array", MAX_EVENTS);
            GIL_LEAVE;
            return NULL;
        }
        if (UNLIKELY(S->n_events == PRESIZE_AFTER))
            presize_columns(S, start, p);
        hash_scanned(S, p);
        release_scanned(S, p);
        p = skip_ws(p, end);
        if (p < end && *p == ',')
            p = skip_ws(p + 1, end);
        else if (p < end && *p == ']')
            return p + 1;
        else
            return syntax_error(S, p, "expected ',' or ']'");
    }
}

/* The whole buffer: whitespace, the array of events, whitespace. */
static int parse_document(Scan *S)
{
    const char *p = skip_ws(S->base, S->end), *end = S->end;
    if (p >= end || *p != '[') {
        syntax_error(S, p, "expected '[' (the traceEvents array)");
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    p = parse_events(S, p);
    Py_END_ALLOW_THREADS
    if (!p)
        return -1;
    p = skip_ws(p, end);
    if (p != end) {
        syntax_error(S, p, "data after the array");
        return -1;
    }
    return 0;
}

/* One top-level member other than "traceEvents": its key (decoded, strict UTF-8) and its value,
 * at p, appended to ``members`` as (key, (start, end)). Returns the end of the value. */
static const char *add_member(Scan *S, const char *key, size_t len, const char *p, PyObject *members)
{
    PyObject *k = PyUnicode_DecodeUTF8(key, (Py_ssize_t)len, NULL), *item;
    const char *q;
    if (!k)
        return NULL;
    if (!(q = skip_value(S, p, 1, NULL))) {
        Py_DECREF(k);
        return NULL;
    }
    item = Py_BuildValue("(N(nn))", k, (Py_ssize_t)(p - S->base), (Py_ssize_t)(q - S->base));
    if (!item || PyList_Append(members, item) < 0)
        q = NULL;
    Py_XDECREF(item);
    return q;
}

/* The whole buffer as a trace file: whitespace, the top-level object, whitespace. Its (last)
 * "traceEvents" array goes into the columns, every other member into ``members``. */
static int parse_trace_document(Scan *S, PyObject *members)
{
    feed_ready_gil(S, S->base);
    const char *p = skip_ws(S->base, S->end), *end = S->end, *key;
    size_t len;
    int done = 0, scanned = 0; /* scanned: an earlier "traceEvents" array is in the columns */
    char events_first = 0;     /* first byte of the last "traceEvents" value; 0: no such key */
    if (p >= end) {
        syntax_error(S, p, "unexpected end of input");
        return -1;
    }
    if (*p != '{') {
        PyErr_SetString(PyExc_ValueError, "the top level is not a JSON object");
        return -1;
    }
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        done = 1;
    }
    while (!done) {
        feed_ready_gil(S, p);
        if (!(p = read_key(S, p, &key, &len)))
            return -1;
        if (len == 11 && memcmp(key, "traceEvents", 11) == 0) {
            char first = p < end ? *p : 0;
            if (first == '[') {
                if (scanned)
                    scan_reset(S); /* the last duplicate wins, as in a dict */
                if (S->released < p)
                    S->released = p; /* pages are handed back from the array on (release_scanned) */
                Py_BEGIN_ALLOW_THREADS
                p = parse_events(S, p);
                Py_END_ALLOW_THREADS
                scanned = 1;
            } else {
                p = skip_value(S, p, 1, NULL);
            }
            events_first = first;
        } else {
            p = add_member(S, key, len, p, members);
        }
        if (!p || !(p = after_member(S, p, &done)))
            return -1;
    }
    while (S->feed_check != UINTPTR_MAX) { /* the end is read: all of it must be written */
        Py_BEGIN_ALLOW_THREADS
        feed_wait(S, S->end);
        Py_END_ALLOW_THREADS
    }
    p = skip_ws(p, end);
    if (p != end) {
        syntax_error(S, p, "data after the top-level object");
        return -1;
    }
    if (!events_first) {
        PyErr_SetString(PyExc_ValueError, "no \"traceEvents\" key at the top level");
        return -1;
    }
    if (events_first != '[') {
        const char *kind = events_first == '{' ? "an object" : events_first == '"' ? "a string"
                         : events_first == 'n' ? "null" : "not a list";
        PyErr_Format(PyExc_ValueError, "\"traceEvents\" is %s, expected a list", kind);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Result and module                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Column: a buffer that owns the PyMem block a column was written into. Handing the scanner's
 * blocks over this way (instead of copying each into a new bytes object) keeps the peak memory
 * of a scan at the JSON text plus one copy of the columns. Writable: the decode turns the
 * starts (int64 ns) into float64 us and the pid / tid string codes into id codes in place
 * (columns.build_rank_trace), where new columns would page-fault fresh memory. */
typedef struct {
    PyObject_HEAD
    char *data; /* owned (PyMem), NULL when empty */
    Py_ssize_t len;
} Column;

static char column_empty[1];

static void column_dealloc(PyObject *self)
{
    PyMem_RawFree(((Column *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static int column_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    Column *c = (Column *)self;
    return PyBuffer_FillInfo(view, self, c->data ? c->data : column_empty, c->len, 0, flags);
}

static Py_ssize_t column_length(PyObject *self) { return ((Column *)self)->len; }

static PyBufferProcs column_as_buffer = {.bf_getbuffer = column_getbuffer};
static PySequenceMethods column_as_sequence = {.sq_length = column_length};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfreport.load._scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_sequence = &column_as_sequence,
    .tp_as_buffer = &column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A scanner output column: a buffer of native-endian numbers (use np.frombuffer).",
};

/* A Column taking over ``b``'s block (trimmed to its length); ``b`` is left empty. */
static PyObject *column_from_buf(Buf *b)
{
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c)
        return NULL;
    char *data = b->data;
    if (data && b->len == 0) {
        PyMem_RawFree(data);
        data = NULL;
    } else if (data && b->len < b->cap) {
        char *trimmed = PyMem_RawRealloc(data, b->len); /* shrinking: in place, no copy */
        if (trimmed)
            data = trimmed;
    }
    c->data = data;
    c->len = (Py_ssize_t)b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)c;
}

/* A list of Columns, one per buffer (the buffers are emptied). */
static PyObject *bufs_to_list(Buf *bufs, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *c = column_from_buf(&bufs[k]);
        if (!c) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, c);
    }
    return list;
}

/* The result tuple; ``members`` (may be NULL) is appended as its last item. */
static PyObject *build_result(Scan *S, PyObject *members)
{
    PyObject *strings = interner_to_list(&S->strings); /* first, while the text is all there */
    interner_free(&S->strings);
    PyObject *n = PyLong_FromLongLong(S->n_events);
    PyObject *top = bufs_to_list(S->top_cols, S->top.n);
    PyObject *rows = bufs_to_list(S->arg_rows, S->arg.n);
    PyObject *vals = bufs_to_list(S->arg_vals, S->arg.n);
    PyObject *result = NULL;
    if (n && top && rows && vals && strings)
        result = members ? PyTuple_Pack(6, n, top, rows, vals, strings, members)
                         : PyTuple_Pack(5, n, top, rows, vals, strings);
    Py_XDECREF(n);
    Py_XDECREF(top);
    Py_XDECREF(rows);
    Py_XDECREF(vals);
    Py_XDECREF(strings);
    return result;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    PyObject *obj, *top_spec, *arg_spec, *result = NULL;
    Py_buffer view;
    Scan S;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO:scan", &obj, &top_spec, &arg_spec))
        return NULL;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    memset(&S, 0, sizeof S);
    S.base = view.buf;
    S.end = S.base + view.len;
    S.what = "invalid JSON in traceEvents";
    if (scan_init(&S, top_spec, arg_spec) == 0 && parse_document(&S) == 0)
        result = build_result(&S, NULL);
    scan_free(&S);
    PyBuffer_Release(&view);
    return result;
}

/* ``obj``'s buffer in ``feed`` when it is a feed (FEED_SLOTS aligned, writable int64 slots);
 * -1 with ValueError naming ``who`` otherwise. */
static int feed_buffer(PyObject *obj, Py_buffer *feed, const char *who)
{
    if (PyObject_GetBuffer(obj, feed, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return -1;
    if (feed->len != FEED_SLOTS * (Py_ssize_t)sizeof(int64_t) || ((uintptr_t)feed->buf & 7)) {
        PyBuffer_Release(feed);
        PyErr_Format(PyExc_ValueError, "%s: feed must be %d aligned int64 slots", who, FEED_SLOTS);
        return -1;
    }
    return 0;
}

static PyObject *scan_document(PyObject *self, PyObject *args)
{
    PyObject *obj, *top_spec, *arg_spec, *members, *result = NULL, *feed_obj = Py_None;
    Py_buffer view, feed = {0};
    Scan S;
    int release = 0, checksum = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO|ppO:scan_document", &obj, &top_spec, &arg_spec, &release, &checksum, &feed_obj))
        return NULL;
    if (feed_obj != Py_None) {
        if (!HAVE_FEED) {
            PyErr_SetString(PyExc_ValueError, "scan_document: this build cannot scan a text being written");
            return NULL;
        }
        if (checksum) {
            PyErr_SetString(PyExc_ValueError, "scan_document: a feed without checksum");
            return NULL;
        }
        if (feed_buffer(feed_obj, &feed, "scan_document") < 0)
            return NULL;
    }
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) {
        if (feed.buf)
            PyBuffer_Release(&feed);
        return NULL;
    }
    memset(&S, 0, sizeof S);
    S.base = view.buf;
    S.end = S.base + view.len;
    S.feed = feed.buf;
    S.release = release;
    S.released = S.base;
    S.what = "invalid JSON";
    if (checksum) {
        if (!(S.hash = XXH3_createState()) || XXH3_128bits_reset(S.hash) != XXH_OK) {
            XXH3_freeState(S.hash);
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        S.hashed = S.base;
    }
    if ((members = PyList_New(0)) && scan_init(&S, top_spec, arg_spec) == 0 &&
        parse_trace_document(&S, members) == 0 && (result = build_result(&S, members)) && S.hash) {
        XXH128_canonical_t digest;
        hash_to(&S, S.end); /* the rest, after the last event */
        XXH128_canonicalFromHash(&digest, XXH3_128bits_digest(S.hash));
        PyObject *with = Py_BuildValue("(Oy#d)", result, (const char *)digest.digest, (Py_ssize_t)sizeof digest.digest,
                                       S.hash_s);
        Py_SETREF(result, with);
    }
    Py_XDECREF(members);
    XXH3_freeState(S.hash);
    scan_free(&S);
    PyBuffer_Release(&view);
    if (feed.buf)
        PyBuffer_Release(&feed);
    return result;
}

/* feed_publish(feed, written, done): the writer's side of scan_document's feed (see feed_wait):
 * ``written`` bytes of the text are in the buffer (a release store, after them), and with
 * ``done`` the writer has stopped. */
#if HAVE_FEED
static PyObject *feed_publish(PyObject *self, PyObject *args)
{
    PyObject *obj;
    long long written;
    int done = 0;
    Py_buffer feed;
    (void)self;
    if (!PyArg_ParseTuple(args, "OL|p:feed_publish", &obj, &written, &done))
        return NULL;
    if (feed_buffer(obj, &feed, "feed_publish") < 0)
        return NULL;
    int64_t *slot = feed.buf;
    __atomic_store_n(&slot[FEED_AVAIL], (int64_t)written, __ATOMIC_RELEASE);
    if (done)
        __atomic_store_n(&slot[FEED_DONE], (int64_t)1, __ATOMIC_RELEASE);
    PyBuffer_Release(&feed);
    Py_RETURN_NONE;
}
#endif

/* Tests: use only the first n (a power of two, 1 to TEXT_CACHE_SLOTS) entries of the text cache,
 * so that different values meet in one entry (with one slot, every lookup compares with the
 * last value stored). Returns the previous count. */
static PyObject *set_text_cache_slots(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1 || n > TEXT_CACHE_SLOTS || (n & (n - 1))) {
        PyErr_Format(PyExc_ValueError, "slots must be a power of two from 1 to %d", TEXT_CACHE_SLOTS);
        return NULL;
    }
    size_t previous = text_cache_mask + 1;
    text_cache_mask = (size_t)n - 1;
    return PyLong_FromSize_t(previous);
}

/* Tests: the scan waits for only n bytes past an event's start (an event longer than that
 * outruns the text being written: the caller's fallback). Returns the previous n. */
static PyObject *set_feed_margin(PyObject *self, PyObject *arg)
{
    (void)self;
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "the margin must be at least 1 byte");
        return NULL;
    }
    int64_t previous = feed_margin;
    feed_margin = (int64_t)n;
    return PyLong_FromLongLong((long long)previous);
}

static PyMethodDef scan_methods[] = {
#if HAVE_FEED
    {"feed_publish", feed_publish, METH_VARARGS,
     "feed_publish(feed, written, done=False): a feed's writer publishes how much of the text it\n"
     "wrote (and that it stopped): see scan_document's feed."},
#endif
    {"_set_feed_margin", set_feed_margin, METH_O,
     "_set_feed_margin(n) -> previous n: for tests, a fed scan waits for n bytes past each event."},
    {"_set_text_cache_slots", set_text_cache_slots, METH_O,
     "_set_text_cache_slots(n) -> previous n: for tests, the text cache uses n entries only."},
    {"scan", scan, METH_VARARGS,
     "scan(buf, top_fields, arg_fields) -> (n_events, top, arg_rows, arg_values, strings)\n\n"
     "Scan the JSON text of a traceEvents array into columns (see perfreport.load.fields).\n"
     "top[k]: dense column of top_fields[k] as bytes (float64 for 'f', int64 for 'i' and 'n',\n"
     "int32 string codes for 's');\n"
     "arg_rows[k], arg_values[k]: int32 event positions having args key arg_fields[k], and the\n"
     "values; strings: the string table. Raises ValueError for malformed JSON."},
    {"scan_document", scan_document, METH_VARARGS,
     "scan_document(buf, top_fields, arg_fields, release=False, checksum=False, feed=None)\n"
     "    -> (n_events, top, arg_rows, arg_values, strings, members)\n\n"
     "Scan a whole trace file (a JSON object) in one pass: its \"traceEvents\" array into columns,\n"
     "as scan() does, and every other top-level member into members, a list of\n"
     "(key, (start, end)): the byte span of the member's value in buf (duplicate keys all\n"
     "listed, in order; the last \"traceEvents\" is the one scanned). Raises ValueError for\n"
     "malformed JSON (with the byte offset in buf), a top level that is not an object, no\n"
     "\"traceEvents\" key or a \"traceEvents\" that is not an array.\n"
     "release: the pages of the traceEvents array may be handed back to the kernel as they are\n"
     "scanned (they then read from the file again in a file mapping, as zeros in other memory);\n"
     "the other members' spans are never handed back.\n"
     "checksum: return (the tuple above, digest, seconds): the 16-byte canonical XXH3-128 of all\n"
     "of buf, hashed as it is scanned (the module's CHECKSUM names the algorithm), and the time\n"
     "the hashing took.\n"
     "feed: 6 int64 slots (written, done, scanned, cancel, pause, waiting) when buf is being written as it is\n"
     "scanned (feed_publish); the scan waits for the text before each event."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "Fast scanner of Kineto traceEvents JSON (see scan_py for the reference).",
    .m_size = -1,
    .m_methods = scan_methods,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    if (PyType_Ready(&ColumnType) < 0)
        return NULL;
#if HAVE_STRTOD_L
    if (!c_numeric)
        c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
#endif
    PyObject *m = PyModule_Create(&scan_module);
    /* RELEASE_IN_EVENTS: scan_document's release never touches the other members (older builds
     * released from the buffer's start: safe for a file mapping only) */
    if (m && (PyModule_AddStringConstant(m, "KINDS", KINDS) < 0 ||
              PyModule_AddIntConstant(m, "RELEASE_IN_EVENTS", 1) < 0 ||
              PyModule_AddIntConstant(m, "FEED_MARGIN", FEED_MARGIN) < 0 ||
              PyModule_AddStringConstant(m, "CHECKSUM", "xxh3_128") < 0 ||
              PyModule_AddIntConstant(m, "ROWS_BYTES", ROWS_BYTES) < 0 ||
              PyModule_AddObjectRef(m, "Column", (PyObject *)&ColumnType) < 0))
        Py_CLEAR(m);
    return m;
}
