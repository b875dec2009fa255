/*
 * sdk.records._writer: the record writer of sdk/records/_writer_py.py, in C.
 *
 * Why: appending a record to the open batch runs once per record a producer sends; in Python the
 * encoding alone (varints, joining the parts, growing the buffer) costs about half a microsecond,
 * here a call and a copy. RecordsWriter is the base class of sdk.records.RecordBatchBuilder, so
 * `builder.append(...)` is a call of the C method itself, with no Python frame in between.
 *
 * A RecordsWriter holds the batch's bytearray (61 header bytes that RecordBatchBuilder.build
 * writes, then the records), the record count, the first and the largest timestamp and the size
 * limit. `append` encodes one record (length, attributes, timestamp delta, offset delta, key,
 * value, headers: zigzag varints as Kafka's DefaultRecord writes them) and adds it, or refuses
 * (None, nothing changed) when it would take the batch past the limit; the first record is
 * always taken. `append_run` appends a run of send_many's prepared records. Every input is checked
 * before anything is written, so a refused or failing append leaves no trace. The Python twin
 * states the rules (which input raises which error); tests/records/test_writer.py holds the two
 * to the same bytes, answers and error classes on random and edge input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define BATCH_HEADER_SIZE 61
/* Longest varint of an int64 (and so of every field here). */
#define MAX_VARINT 10

typedef struct {
    PyObject_HEAD
    PyObject *buf; /* bytearray: header placeholder + encoded records */
    long long count;
    long long base_timestamp;
    long long max_timestamp;
    Py_ssize_t limit;
} RecordsWriter;

static inline uint64_t
zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline Py_ssize_t
varint_size(uint64_t u)
{
    Py_ssize_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline char *
put_varint(char *p, uint64_t u)
{
    while (u >= 0x80) {
        *p++ = (char)(u | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

/* A growable scratch buffer for the header section (rare: most records have no headers). */
typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t alloc;
} Scratch;

static int
scratch_reserve(Scratch *s, Py_ssize_t more)
{
    if (s->size + more <= s->alloc) {
        return 0;
    }
    Py_ssize_t alloc = s->alloc ? s->alloc : 256;
    while (alloc < s->size + more) {
        if (alloc > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        alloc *= 2;
    }
    char *data = PyMem_Realloc(s->data, (size_t)alloc);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->data = data;
    s->alloc = alloc;
    return 0;
}

static int
scratch_put(Scratch *s, const char *bytes, Py_ssize_t n)
{
    if (scratch_reserve(s, n + MAX_VARINT) < 0) {
        return -1;
    }
    char *p = put_varint(s->data + s->size, zigzag(n));
    memcpy(p, bytes, (size_t)n);
    s->size = (p - s->data) + n;
    return 0;
}

/* A key, value or header value: None (a length of -1) or any C-contiguous bytes-like object. */
typedef struct {
    Py_buffer view;
    const char *data;
    Py_ssize_t len; /* -1: null */
    int held;       /* view must be released */
} Field;

static int
field_get(PyObject *obj, Field *f, const char *what)
{
    f->held = 0;
    if (obj == Py_None) {
        f->data = NULL;
        f->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        f->data = PyBytes_AS_STRING(obj);
        f->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a bytes-like object or None, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    f->held = 1;
    f->data = f->view.buf;
    f->len = f->view.len;
    return 0;
}

static inline void
field_release(Field *f)
{
    if (f->held) {
        PyBuffer_Release(&f->view);
        f->held = 0;
    }
}

/* Encodes the header section (count, then each key and nullable value) into `s`. */
static int
encode_headers(PyObject *headers, Scratch *s)
{
    PyObject *list = PySequence_List(headers);
    if (list == NULL) {
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    int rc = -1;
    if (scratch_reserve(s, MAX_VARINT) < 0) {
        goto done;
    }
    s->size = put_varint(s->data + s->size, zigzag(n)) - s->data;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast(PyList_GET_ITEM(list, i), "a header must be a (key, value) pair");
        if (pair == NULL) {
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_ValueError, "a header must be a (key, value) pair, not %zd items",
                         PySequence_Fast_GET_SIZE(pair));
            Py_DECREF(pair);
            goto done;
        }
        PyObject *hkey = PySequence_Fast_GET_ITEM(pair, 0);
        PyObject *hvalue = PySequence_Fast_GET_ITEM(pair, 1);
        if (!PyUnicode_Check(hkey)) {
            PyErr_Format(PyExc_TypeError, "a header key must be a str, not %.100s", Py_TYPE(hkey)->tp_name);
            Py_DECREF(pair);
            goto done;
        }
        Py_ssize_t klen;
        const char *kdata = PyUnicode_AsUTF8AndSize(hkey, &klen);
        if (kdata == NULL || scratch_put(s, kdata, klen) < 0) {
            Py_DECREF(pair);
            goto done;
        }
        Field value;
        if (field_get(hvalue, &value, "a header value") < 0) {
            Py_DECREF(pair);
            goto done;
        }
        int failed;
        if (value.len < 0) {
            failed = scratch_reserve(s, 1);
            if (!failed) {
                s->data[s->size++] = 0x01;
            }
        }
        else {
            failed = scratch_put(s, value.data, value.len);
        }
        field_release(&value);
        Py_DECREF(pair);
        if (failed) {
            goto done;
        }
    }
    rc = 0;
done:
    Py_DECREF(list);
    return rc;
}

/* Sets the bytearray's size to `size`, growing its allocation about twofold (to `limit` at
 * most, unless `size` is more): bytearray's own growth (an eighth) would copy a batch some forty
 * times on its way to 16 KiB. */
static int
grow(PyObject *buf, Py_ssize_t size, Py_ssize_t limit)
{
    PyByteArrayObject *array = (PyByteArrayObject *)buf;
    if (size < array->ob_alloc || size > PY_SSIZE_T_MAX / 4) {
        return PyByteArray_Resize(buf, size); /* fits: only the size changes */
    }
    /* Growing to `target` allocates exactly that (bytearray's "major upsize"); shrinking back to
     * `size` then keeps the allocation, since `size` is at least half of it (bytearray shrinks
     * the allocation below half). */
    Py_ssize_t target = 2 * size - 1;
    if (target > limit) {
        target = limit;
    }
    if (target > size && PyByteArray_Resize(buf, target) < 0) {
        return -1;
    }
    return PyByteArray_Resize(buf, size);
}

static long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The timestamp argument: None (now) or an int in int64 range. */
static int
get_timestamp(PyObject *obj, long long *out)
{
    if (obj == Py_None) {
        *out = now_ms();
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "timestamp_ms must be an int or None, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "timestamp_ms does not fit in an int64");
        return -1;
    }
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Appends one record; 1 when added, 0 when refused (the batch is full), -1 on error. */
static int
writer_append_record(RecordsWriter *self, long long timestamp, PyObject *key, PyObject *value, PyObject *headers)
{
    long long count = self->count;
    long long delta = 0;
    if (count && __builtin_sub_overflow(timestamp, self->base_timestamp, &delta)) {
        PyErr_SetString(PyExc_ValueError, "the timestamp delta does not fit in a varlong");
        return -1;
    }
    Field k, v;
    if (field_get(key, &k, "key") < 0) {
        return -1;
    }
    if (field_get(value, &v, "value") < 0) {
        field_release(&k);
        return -1;
    }
    Scratch hdr = {NULL, 0, 0};
    int has_headers = 0;
    if (headers != Py_None) {
        has_headers = PyObject_IsTrue(headers);
        if (has_headers < 0 || (has_headers && encode_headers(headers, &hdr) < 0)) {
            goto fail;
        }
    }
    uint64_t zdelta = zigzag(delta);
    Py_ssize_t body = 1 + varint_size(zdelta) + varint_size(zigzag(count));
    body += k.len < 0 ? 1 : varint_size(zigzag(k.len)) + k.len;
    body += v.len < 0 ? 1 : varint_size(zigzag(v.len)) + v.len;
    body += has_headers ? hdr.size : 1;
    Py_ssize_t total = varint_size(zigzag(body)) + body;
    Py_ssize_t old = PyByteArray_GET_SIZE(self->buf);
    if (count && old + total > self->limit) {
        field_release(&k);
        field_release(&v);
        PyMem_Free(hdr.data);
        return 0;
    }
    if (grow(self->buf, old + total, self->limit) < 0) {
        goto fail;
    }
    char *p = PyByteArray_AS_STRING(self->buf) + old;
    p = put_varint(p, zigzag(body));
    *p++ = 0; /* record attributes: unused, always 0 */
    p = put_varint(p, zdelta);
    p = put_varint(p, zigzag(count));
    if (k.len < 0) {
        *p++ = 0x01;
    }
    else {
        p = put_varint(p, zigzag(k.len));
        memcpy(p, k.data, (size_t)k.len);
        p += k.len;
    }
    if (v.len < 0) {
        *p++ = 0x01;
    }
    else {
        p = put_varint(p, zigzag(v.len));
        memcpy(p, v.data, (size_t)v.len);
        p += v.len;
    }
    if (has_headers) {
        memcpy(p, hdr.data, (size_t)hdr.size);
    }
    else {
        *p = 0;
    }
    field_release(&k);
    field_release(&v);
    PyMem_Free(hdr.data);
    if (count) {
        if (timestamp > self->max_timestamp) {
            self->max_timestamp = timestamp;
        }
    }
    else {
        self->base_timestamp = self->max_timestamp = timestamp;
    }
    self->count = count + 1;
    return 1;
fail:
    field_release(&k);
    field_release(&v);
    PyMem_Free(hdr.data);
    return -1;
}

static PyObject *
writer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* Arguments are for __init__ (a subclass such as RecordBatchBuilder has its own). */
    RecordsWriter *self = (RecordsWriter *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->buf = PyByteArray_FromStringAndSize(NULL, BATCH_HEADER_SIZE);
    if (self->buf == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    memset(PyByteArray_AS_STRING(self->buf), 0, BATCH_HEADER_SIZE);
    self->count = 0;
    self->base_timestamp = -1;
    self->max_timestamp = -1;
    self->limit = PY_SSIZE_T_MAX;
    return (PyObject *)self;
}

static int
writer_init(RecordsWriter *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"limit", NULL};
    PyObject *limit = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:RecordsWriter", names, &limit)) {
        return -1;
    }
    if (limit == Py_None) {
        self->limit = PY_SSIZE_T_MAX;
        return 0;
    }
    Py_ssize_t value = PyNumber_AsSsize_t(limit, PyExc_OverflowError);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    self->limit = value;
    return 0;
}

static void
writer_dealloc(RecordsWriter *self)
{
    Py_CLEAR(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static const char *append_names[] = {"timestamp_ms", "key", "value", "headers"};

/* append(timestamp_ms, key, value, headers=()) -> offset delta | None */
static PyObject *
writer_append(RecordsWriter *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *given[4] = {NULL, NULL, NULL, Py_None};
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError, "append() takes at most 4 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        given[i] = args[i];
    }
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nkw; i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            int slot = -1;
            for (int j = 0; j < 4; j++) {
                if (PyUnicode_CompareWithASCIIString(name, append_names[j]) == 0) {
                    slot = j;
                    break;
                }
            }
            if (slot < 0 || slot < nargs) {
                PyErr_Format(PyExc_TypeError, "append() got an unexpected or repeated argument %R", name);
                return NULL;
            }
            given[slot] = args[nargs + i];
        }
    }
    for (int j = 0; j < 3; j++) {
        if (given[j] == NULL) {
            PyErr_Format(PyExc_TypeError, "append() missing required argument '%s'", append_names[j]);
            return NULL;
        }
    }
    long long timestamp;
    if (get_timestamp(given[0], &timestamp) < 0) {
        return NULL;
    }
    long long count = self->count;
    int added = writer_append_record(self, timestamp, given[1], given[2], given[3]);
    if (added < 0) {
        return NULL;
    }
    if (!added) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(count);
}

/* append_run(records, index, timestamp_ms, partition, keyless, room, produced_room)
 *     -> (next index, bytes of memory the appended records take) */
static PyObject *
writer_append_run(RecordsWriter *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "append_run() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *records = args[0];
    PyObject *wanted = args[3];
    if (!PyList_Check(records)) {
        PyErr_Format(PyExc_TypeError, "records must be a list, not %.100s", Py_TYPE(records)->tp_name);
        return NULL;
    }
    Py_ssize_t index = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (index == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long timestamp;
    if (get_timestamp(args[2], &timestamp) < 0) {
        return NULL;
    }
    int keyless = PyObject_IsTrue(args[4]);
    if (keyless < 0) {
        return NULL;
    }
    long long room = PyLong_AsLongLong(args[5]);
    if (room == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long produced_room = PyLong_AsLongLong(args[6]);
    if (produced_room == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long added = 0;
    if (index < 0) {
        index = 0;
    }
    while (index < PyList_GET_SIZE(records)) {
        PyObject *item = PyList_GET_ITEM(records, index);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) {
            PyErr_SetString(PyExc_TypeError,
                            "a prepared record must be a (partition, key, value, headers, size) tuple");
            return NULL;
        }
        Py_INCREF(item);
        int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(item, 0), wanted, Py_EQ);
        long long size = same > 0 ? PyLong_AsLongLong(PyTuple_GET_ITEM(item, 4)) : 0;
        if (same < 0 || (size == -1 && PyErr_Occurred())) {
            Py_DECREF(item);
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 1);
        if (!same || added + size > room || (keyless && (key != Py_None || added >= produced_room))) {
            Py_DECREF(item);
            break;
        }
        int ok = writer_append_record(self, timestamp, key, PyTuple_GET_ITEM(item, 2), PyTuple_GET_ITEM(item, 3));
        Py_DECREF(item);
        if (ok < 0) {
            return NULL;
        }
        if (!ok) {
            break;
        }
        added += size;
        index++;
    }
    return Py_BuildValue("(nL)", index, added);
}

/* -- RecordSizer: sdk.records.sizes.record_size_bound with a limit ------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t limit;
    PyObject *too_large; /* called with the size of a record over the limit; expected to raise */
} RecordSizer;

#define RECORD_OVERHEAD 21
#define HEADER_OVERHEAD 10

static inline Py_ssize_t
length_of(PyObject *obj)
{
    return PyBytes_CheckExact(obj) ? PyBytes_GET_SIZE(obj) : PyObject_Length(obj);
}

static PyObject *
sizer_size(RecordSizer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "size() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t size = RECORD_OVERHEAD, n;
    for (int i = 0; i < 2; i++) {
        if (args[i] != Py_None) {
            if ((n = length_of(args[i])) < 0) {
                return NULL;
            }
            size += n;
        }
    }
    PyObject *headers = args[2];
    int has_headers = headers == Py_None ? 0 : PyObject_IsTrue(headers);
    if (has_headers < 0) {
        return NULL;
    }
    if (has_headers) {
        PyObject *iter = PyObject_GetIter(headers), *pair;
        if (iter == NULL) {
            return NULL;
        }
        size += 1;
        while ((pair = PyIter_Next(iter)) != NULL) {
            PyObject *items = PySequence_Tuple(pair);
            Py_DECREF(pair);
            if (items == NULL) {
                Py_DECREF(iter);
                return NULL;
            }
            if (PyTuple_GET_SIZE(items) != 2) {
                PyErr_Format(PyExc_ValueError, "a header must be a (key, value) pair, not %zd items",
                             PyTuple_GET_SIZE(items));
                Py_DECREF(items);
                Py_DECREF(iter);
                return NULL;
            }
            Py_ssize_t k = length_of(PyTuple_GET_ITEM(items, 0));
            Py_ssize_t v = PyTuple_GET_ITEM(items, 1) == Py_None ? 0 : length_of(PyTuple_GET_ITEM(items, 1));
            Py_DECREF(items);
            if (k < 0 || v < 0) {
                Py_DECREF(iter);
                return NULL;
            }
            size += k + v + HEADER_OVERHEAD;
        }
        Py_DECREF(iter);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if (size > self->limit) {
        PyObject *result = PyObject_CallFunction(self->too_large, "n", size);
        if (result == NULL) {
            return NULL;
        }
        Py_DECREF(result);
    }
    return PyLong_FromSsize_t(size);
}

static int
sizer_init(RecordSizer *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"limit", "too_large", NULL};
    Py_ssize_t limit;
    PyObject *too_large;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO:RecordSizer", names, &limit, &too_large)) {
        return -1;
    }
    self->limit = limit;
    Py_INCREF(too_large);
    Py_XSETREF(self->too_large, too_large);
    return 0;
}

static int
sizer_traverse(RecordSizer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->too_large);
    return 0;
}

static int
sizer_clear(RecordSizer *self)
{
    Py_CLEAR(self->too_large);
    return 0;
}

static void
sizer_dealloc(RecordSizer *self)
{
    PyObject_GC_UnTrack(self);
    sizer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef sizer_methods[] = {
    {"size", (PyCFunction)(void (*)(void))sizer_size, METH_FASTCALL,
     "size(key, value, headers) -> int\n\n"
     "record_size_bound(key, value, headers); too_large(size) is called first when it is over limit."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef sizer_members[] = {
    {"limit", T_PYSSIZET, offsetof(RecordSizer, limit), READONLY, "largest size without too_large"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordSizerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sdk.records._writer.RecordSizer",
    .tp_doc = "RecordSizer(limit, too_large): record_size_bound with a limit (see the twin).",
    .tp_basicsize = sizeof(RecordSizer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sizer_init,
    .tp_traverse = (traverseproc)sizer_traverse,
    .tp_clear = (inquiry)sizer_clear,
    .tp_dealloc = (destructor)sizer_dealloc,
    .tp_methods = sizer_methods,
    .tp_members = sizer_members,
};

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))writer_append, METH_FASTCALL | METH_KEYWORDS,
     "append(timestamp_ms, key, value, headers=()) -> int | None\n\n"
     "Add a record; return its offset delta, or None (nothing added) if the batch is full."},
    {"append_run", (PyCFunction)(void (*)(void))writer_append_run, METH_FASTCALL,
     "append_run(records, index, timestamp_ms, partition, keyless, room, produced_room) -> (int, int)\n\n"
     "Append send_many's prepared records from `index` while they take the same way; see the twin."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef writer_members[] = {
    {"_buf", T_OBJECT_EX, offsetof(RecordsWriter, buf), READONLY, "header placeholder + records"},
    {"_count", T_LONGLONG, offsetof(RecordsWriter, count), READONLY, "records appended"},
    {"_base_timestamp", T_LONGLONG, offsetof(RecordsWriter, base_timestamp), READONLY, "first record's"},
    {"_max_timestamp", T_LONGLONG, offsetof(RecordsWriter, max_timestamp), READONLY, "largest timestamp"},
    {"_limit", T_PYSSIZET, offsetof(RecordsWriter, limit), 0, "batch size bound (bytes)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordsWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sdk.records._writer.RecordsWriter",
    .tp_doc = "RecordsWriter(limit=None): a batch's records, encoded as they are appended.",
    .tp_basicsize = sizeof(RecordsWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = writer_new,
    .tp_init = (initproc)writer_init,
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_methods = writer_methods,
    .tp_members = writer_members,
};

static struct PyModuleDef writer_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sdk.records._writer",
    .m_doc = "The record writer of sdk.records._writer_py in C (see that module).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__writer(void)
{
    if (PyType_Ready(&RecordsWriterType) < 0 || PyType_Ready(&RecordSizerType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&writer_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&RecordsWriterType);
    if (PyModule_AddObject(module, "RecordsWriter", (PyObject *)&RecordsWriterType) < 0) {
        Py_DECREF(&RecordsWriterType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&RecordSizerType);
    if (PyModule_AddObject(module, "RecordSizer", (PyObject *)&RecordSizerType) < 0) {
        Py_DECREF(&RecordSizerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
