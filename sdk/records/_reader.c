/*
 * sdk.records._reader: the record reader of sdk/records/_reader_py.py, in C.
 *
 * Why: reading records is the consumer's hot path (building ConsumerRecords) and most of the
 * broker's produce cost (walking records to validate an append); in Python either costs about a
 * microsecond per record, here a few nanoseconds to walk and a fifth of that to build.
 *
 * One loop (read_section) reads a records section: `count` records that must fill
 * data[start:end] exactly, every read bounded by the record's own end (or the section's, for the
 * record length). It hands each record's fields to one of three outputs, each compiled into its
 * own copy of the loop: the walk (facts for validation, no objects), sdk.records.Record objects,
 * or the consumer's ConsumerRecords. It accepts and rejects exactly what the Python twin does, raising the same
 * CorruptRecordError subclass with the same reason and byte offset; tests/records/test_reader.py
 * holds the two to that on generated, mutated and random input. Read the Python twin for the
 * rules; this file follows it statement by statement.
 *
 * Record classes are __slots__ classes: their slots are filled directly at the offsets their
 * member descriptors give (found once per class), which is what makes a record cheap.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdarg.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE static inline
#endif

/* sdk.records.errors classes, fetched at import. */
static PyObject *InvalidRecordError = NULL;
static PyObject *InvalidRecordCountError = NULL;
static PyObject *InvalidVarintError = NULL;
static PyObject *empty_tuple = NULL;

/* Raises cls(reason, offset); returns -1. */
static int
raise_at(PyObject *cls, Py_ssize_t offset, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *reason = PyUnicode_FromFormatV(format, args);
    va_end(args);
    if (reason == NULL) {
        return -1;
    }
    PyObject *exc = PyObject_CallFunction(cls, "On", reason, offset);
    Py_DECREF(reason);
    if (exc != NULL) {
        PyErr_SetObject(cls, exc);
        Py_DECREF(exc);
    }
    return -1;
}

/* A zigzag varint of at most max_bytes at p[pos:limit], its bits masked to `bits` (32 or 64) as
 * Java's int/long arithmetic does; returns the position after it, or -1 with the error raised. */
ALWAYS_INLINE Py_ssize_t
read_varint(const unsigned char *p, Py_ssize_t pos, Py_ssize_t limit, int max_bytes, int64_t *out)
{
    if (pos + 1 < limit) { /* one or two bytes: nearly every record field */
        if (p[pos] < 0x80) {
            uint64_t u = p[pos];
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return pos + 1;
        }
        if (p[pos + 1] < 0x80) {
            uint64_t u = (uint64_t)(p[pos] & 0x7F) | ((uint64_t)p[pos + 1] << 7);
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return pos + 2;
        }
    }
    uint64_t u = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (pos + i >= limit) {
            return raise_at(InvalidVarintError, pos, "varint runs past the end of the data");
        }
        unsigned char b = p[pos + i];
        u |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (max_bytes == 5) {
                u &= 0xFFFFFFFFu;
            }
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return pos + i + 1;
        }
        shift += 7;
    }
    return raise_at(InvalidVarintError, pos, "varint longer than %d bytes", max_bytes);
}

/* -- record classes ------------------------------------------------------------------------- */

enum {
    F_OFFSET, F_TIMESTAMP, F_KEY, F_VALUE, F_HEADERS,
    /* ConsumerRecord only */
    F_TOPIC, F_PARTITION, F_TIMESTAMP_TYPE, F_CHECKSUM, F_KEY_SIZE, F_VALUE_SIZE,
    F_COUNT
};
#define RECORD_FIELDS 5
static const char *FIELD_NAMES[F_COUNT] = {
    "offset", "timestamp", "key", "value", "headers", "topic", "partition", "timestamp_type",
    "checksum", "serialized_key_size", "serialized_value_size",
};

typedef struct {
    PyTypeObject *cls;  /* borrowed identity only; a reference is held in `held` */
    PyObject *held;
    Py_ssize_t offsets[F_COUNT];
} slot_layout;

static slot_layout record_layout, consumer_layout;

/* Fills `layout` for cls (its first `fields` slots by FIELD_NAMES) unless it already is. */
static int
prepare_layout(slot_layout *layout, PyObject *cls, int fields)
{
    if (layout->cls == (PyTypeObject *)cls) {
        return 0;
    }
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "record_class must be a class");
        return -1;
    }
    Py_ssize_t offsets[F_COUNT];
    for (int i = 0; i < fields; i++) {
        PyObject *descr = PyObject_GetAttrString(cls, FIELD_NAMES[i]);
        if (descr == NULL) {
            return -1;
        }
        if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "%s is not an object slot", FIELD_NAMES[i]);
            return -1;
        }
        offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
    }
    memcpy(layout->offsets, offsets, sizeof(offsets));
    Py_XSETREF(layout->held, Py_NewRef(cls));
    layout->cls = (PyTypeObject *)cls;
    return 0;
}

ALWAYS_INLINE void
set_slot(PyObject *obj, const slot_layout *layout, int field, PyObject *value)
{
    *(PyObject **)((char *)obj + layout->offsets[field]) = value; /* steals the reference */
}

/* base + delta as a Python int, exact where the sum leaves int64. */
static PyObject *
long_sum(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *result = NULL;
    if (a != NULL && b != NULL) {
        result = PyNumber_Add(a, b);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return result;
}

/* -- the reader ----------------------------------------------------------------------------- */

enum { OUT_WALK, OUT_RECORDS, OUT_CONSUMER };

typedef struct {
    int64_t ts_delta, offset_delta, key_size, value_size;
    Py_ssize_t key, value;  /* positions of the key and value bytes */
    PyObject *headers;      /* new reference; NULL for the walk */
} record_fields;

/* Reads a record's header section at data[pos:limit] (limit: the record's end); returns the
 * position after it, or -1 with the error raised. *headers gets a list or tuple (as `out`
 * asks) of (str, bytes | None) pairs; the walk only checks them. */
ALWAYS_INLINE Py_ssize_t
read_headers(const unsigned char *data, Py_ssize_t pos, Py_ssize_t limit, Py_ssize_t record_start,
             int out, PyObject **headers)
{
    int64_t count = 0, size = 0;
    pos = read_varint(data, pos, limit, 5, &count);
    if (pos < 0) {
        return -1;
    }
    if (count == 0) {
        if (out == OUT_RECORDS) {
            *headers = PyList_New(0);
            return *headers == NULL ? -1 : pos;
        }
        if (out == OUT_CONSUMER) {
            *headers = Py_NewRef(empty_tuple);
        }
        return pos;
    }
    if (count < 0) {
        return raise_at(InvalidRecordError, record_start, "negative header count %lld",
                        (long long)count);
    }
    if (count > (limit - pos) / 2) {
        return raise_at(InvalidRecordError, record_start, "%lld headers cannot fit in the record",
                        (long long)count);
    }
    PyObject *list = NULL;
    if (out != OUT_WALK) {
        list = out == OUT_RECORDS ? PyList_New(count) : PyTuple_New(count);
        if (list == NULL) {
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        pos = read_varint(data, pos, limit, 5, &size);
        if (pos < 0) {
            goto fail;
        }
        if (size < 0 || size > limit - pos) {
            raise_at(InvalidRecordError, record_start, "header key length %lld is invalid",
                     (long long)size);
            goto fail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)data + pos, (Py_ssize_t)size, "strict");
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                raise_at(InvalidRecordError, record_start, "header key is not UTF-8");
            }
            goto fail;
        }
        pos += (Py_ssize_t)size;
        pos = read_varint(data, pos, limit, 5, &size);
        if (pos < 0) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *value;
        if (size < 0) {
            value = Py_NewRef(Py_None);
        }
        else if (size > limit - pos) {
            Py_DECREF(key);
            raise_at(InvalidRecordError, record_start, "header value length %lld overruns the record",
                     (long long)size);
            goto fail;
        }
        else if (out == OUT_WALK) {
            value = Py_NewRef(Py_None);
            pos += (Py_ssize_t)size;
        }
        else {
            value = PyBytes_FromStringAndSize((const char *)data + pos, (Py_ssize_t)size);
            if (value == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            pos += (Py_ssize_t)size;
        }
        if (out == OUT_WALK) {
            Py_DECREF(key);
            Py_DECREF(value);
            continue;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        if (out == OUT_RECORDS) {
            PyList_SET_ITEM(list, i, pair);
        }
        else {
            PyTuple_SET_ITEM(list, i, pair);
        }
    }
    *headers = list;
    return pos;
fail:
    Py_XDECREF(list);
    return -1;
}

/* Everything an output needs besides the fields. */
typedef struct {
    /* walk */
    int64_t min_ts, max_ts;
    Py_ssize_t gap, null_key;
    /* records */
    PyObject *list;
    int64_t base_offset, base_timestamp, min_offset;
    PyObject *fixed_timestamp, *timestamp_type, *topic, *partition;
    const unsigned char *data;
} output;

/* Hands one record to the output; 0, or -1 with an exception set. Steals f->headers. */
ALWAYS_INLINE int
emit(int out, output *o, Py_ssize_t index, record_fields *f)
{
    if (out == OUT_WALK) {
        if (f->ts_delta < o->min_ts) {
            o->min_ts = f->ts_delta;
        }
        if (f->ts_delta > o->max_ts) {
            o->max_ts = f->ts_delta;
        }
        if (f->offset_delta != index && o->gap < 0) {
            o->gap = index;
        }
        if (f->key_size < 0 && o->null_key < 0) {
            o->null_key = index;
        }
        return 0;
    }
    const slot_layout *layout = out == OUT_RECORDS ? &record_layout : &consumer_layout;
    if (out == OUT_CONSUMER) {
        int64_t offset;
        int below = __builtin_add_overflow(o->base_offset, f->offset_delta, &offset)
                        ? f->offset_delta < 0
                        : offset < o->min_offset;
        if (below) {
            Py_DECREF(f->headers);
            return 0;
        }
    }
    PyObject *record = layout->cls->tp_alloc(layout->cls, 0);
    if (record == NULL) {
        Py_DECREF(f->headers);
        return -1;
    }
    set_slot(record, layout, F_HEADERS, f->headers);
    PyObject *v;
    if (!(v = long_sum(o->base_offset, f->offset_delta))) goto fail;
    set_slot(record, layout, F_OFFSET, v);
    if (o->fixed_timestamp == Py_None) {
        if (!(v = long_sum(o->base_timestamp, f->ts_delta))) goto fail;
    }
    else {
        v = Py_NewRef(o->fixed_timestamp);
    }
    set_slot(record, layout, F_TIMESTAMP, v);
    if (f->key_size < 0) {
        v = Py_NewRef(Py_None);
    }
    else if (!(v = PyBytes_FromStringAndSize((const char *)o->data + f->key, (Py_ssize_t)f->key_size))) {
        goto fail;
    }
    set_slot(record, layout, F_KEY, v);
    if (f->value_size < 0) {
        v = Py_NewRef(Py_None);
    }
    else if (!(v = PyBytes_FromStringAndSize((const char *)o->data + f->value,
                                             (Py_ssize_t)f->value_size))) {
        goto fail;
    }
    set_slot(record, layout, F_VALUE, v);
    if (out == OUT_CONSUMER) {
        set_slot(record, layout, F_TOPIC, Py_NewRef(o->topic));
        set_slot(record, layout, F_PARTITION, Py_NewRef(o->partition));
        set_slot(record, layout, F_TIMESTAMP_TYPE, Py_NewRef(o->timestamp_type));
        set_slot(record, layout, F_CHECKSUM, Py_NewRef(Py_None));
        if (!(v = PyLong_FromLongLong(f->key_size < 0 ? -1 : f->key_size))) goto fail;
        set_slot(record, layout, F_KEY_SIZE, v);
        if (!(v = PyLong_FromLongLong(f->value_size < 0 ? -1 : f->value_size))) goto fail;
        set_slot(record, layout, F_VALUE_SIZE, v);
    }
    if (PyList_Append(o->list, record) < 0) goto fail;
    Py_DECREF(record);
    return 0;
fail:
    Py_DECREF(record);
    return -1;
}

/* Reads the `count` records that must fill data[start:end] exactly, handing each to the output;
 * 0, or -1 with the error raised (records before it have been handed over). */
ALWAYS_INLINE int
read_section(const unsigned char *data, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
             int out, output *o)
{
    if (count < 0) {
        return raise_at(InvalidRecordCountError, start, "negative recordCount %zd", count);
    }
    Py_ssize_t pos = start;
    record_fields f = {0};
    for (Py_ssize_t index = 0; index < count; index++) {
        Py_ssize_t record_start = pos;
        int64_t length = 0;
        if (pos >= end) {
            return raise_at(InvalidRecordCountError, pos,
                            "recordCount is %zd but the records section holds %zd", count, index);
        }
        if ((pos = read_varint(data, pos, end, 5, &length)) < 0) return -1;
        if (length < 0) {
            return raise_at(InvalidRecordError, record_start, "negative record length %lld",
                            (long long)length);
        }
        if (length > end - pos) {
            return raise_at(InvalidRecordError, record_start, "record length %lld overruns the batch",
                            (long long)length);
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        if (pos >= record_end) {
            return raise_at(InvalidRecordError, record_start,
                            "record length %lld is too short for its fields", (long long)length);
        }
        pos += 1; /* attributes: unused */
        if ((pos = read_varint(data, pos, record_end, 10, &f.ts_delta)) < 0) return -1;
        if ((pos = read_varint(data, pos, record_end, 5, &f.offset_delta)) < 0) return -1;
        if ((pos = read_varint(data, pos, record_end, 5, &f.key_size)) < 0) return -1;
        f.key = pos;
        if (f.key_size >= 0) {
            if (f.key_size > record_end - pos) {
                return raise_at(InvalidRecordError, record_start, "key length %lld overruns the record",
                                (long long)f.key_size);
            }
            pos += (Py_ssize_t)f.key_size;
        }
        if ((pos = read_varint(data, pos, record_end, 5, &f.value_size)) < 0) return -1;
        f.value = pos;
        if (f.value_size >= 0) {
            if (f.value_size > record_end - pos) {
                return raise_at(InvalidRecordError, record_start,
                                "value length %lld overruns the record", (long long)f.value_size);
            }
            pos += (Py_ssize_t)f.value_size;
        }
        f.headers = NULL;
        if ((pos = read_headers(data, pos, record_end, record_start, out, &f.headers)) < 0) return -1;
        if (pos != record_end) {
            Py_XDECREF(f.headers);
            return raise_at(InvalidRecordError, record_start,
                            "record length %lld disagrees with its fields (%zd bytes)",
                            (long long)length, pos - record_end + (Py_ssize_t)length);
        }
        if (emit(out, o, index, &f) < 0) return -1;
    }
    if (pos != end) {
        return raise_at(InvalidRecordCountError, pos,
                        "%zd bytes remain after the %zd records of recordCount", end - pos, count);
    }
    return 0;
}

/* -- the module's functions ----------------------------------------------------------------- */

/* Gets the buffer and checks the section's bounds; 0, or -1 with an exception set. */
static int
open_section(PyObject *buffer, Py_buffer *view, Py_ssize_t start, Py_ssize_t end)
{
    if (PyObject_GetBuffer(buffer, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (start < 0 || start > end || end > view->len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "records section [%zd, %zd) is outside the %zd-byte buffer",
                     start, end, view->len);
        return -1;
    }
    return 0;
}

/* The (records, error) pair record outputs return: the records read before the error (all of
 * them, and None, when there is none). Only CorruptRecordErrors are returned; others propagate. */
static PyObject *
records_and_error(output *o, int status)
{
    if (status == 0) {
        return Py_BuildValue("(NO)", o->list, Py_None);
    }
    if (!PyErr_ExceptionMatches(InvalidRecordError) && !PyErr_ExceptionMatches(InvalidRecordCountError)) {
        Py_DECREF(o->list);
        return NULL;
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return Py_BuildValue("(NN)", o->list, value);
}

PyDoc_STRVAR(walk_records_doc,
"walk_records(data, start, end, count) -> (count, min_ts_delta, max_ts_delta, first_offset_gap,\n"
"first_null_key)\n\nThe walk of sdk.records._reader_py.walk_records.");

static PyObject *
walk_records(PyObject *module, PyObject *args)
{
    PyObject *buffer;
    Py_ssize_t start, end, count;
    if (!PyArg_ParseTuple(args, "Onnn", &buffer, &start, &end, &count)) {
        return NULL;
    }
    Py_buffer view;
    if (open_section(buffer, &view, start, end) < 0) {
        return NULL;
    }
    output o = {.min_ts = INT64_MAX, .max_ts = INT64_MIN, .gap = -1, .null_key = -1};
    int status = read_section((const unsigned char *)view.buf, start, end, count, OUT_WALK, &o);
    PyBuffer_Release(&view);
    if (status < 0) {
        return NULL;
    }
    if (count == 0) {
        return Py_BuildValue("(nOOnn)", (Py_ssize_t)0, Py_None, Py_None, (Py_ssize_t)-1,
                             (Py_ssize_t)-1);
    }
    return Py_BuildValue("(nLLnn)", count, (long long)o.min_ts, (long long)o.max_ts, o.gap,
                         o.null_key);
}

/* Reads the section into the record output `out` (o's parameters set): (records, error).
 * Inlined into each caller, so that the reader is compiled for that output. */
ALWAYS_INLINE PyObject *
read_into_records(PyObject *buffer, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count, int out,
                  output *o)
{
    Py_buffer view;
    if (open_section(buffer, &view, start, end) < 0) {
        return NULL;
    }
    if ((o->list = PyList_New(0)) == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    o->data = (const unsigned char *)view.buf;
    int status = read_section(o->data, start, end, count, out, o);
    PyBuffer_Release(&view);
    return records_and_error(o, status);
}

PyDoc_STRVAR(read_records_doc,
"read_records(data, start, end, count, base_offset, base_timestamp, fixed_timestamp,\n"
"record_class, consumer=None) -> (records, error)\n\n"
"The records of sdk.records._reader_py.read_records.");

static PyObject *
read_records(PyObject *module, PyObject *args)
{
    PyObject *buffer, *cls, *consumer = Py_None;
    Py_ssize_t start, end, count;
    output o = {0};
    if (!PyArg_ParseTuple(args, "OnnnLLOO|O", &buffer, &start, &end, &count, &o.base_offset,
                          &o.base_timestamp, &o.fixed_timestamp, &cls, &consumer)) {
        return NULL;
    }
    if (consumer == Py_None) {
        if (prepare_layout(&record_layout, cls, RECORD_FIELDS) < 0) {
            return NULL;
        }
        return read_into_records(buffer, start, end, count, OUT_RECORDS, &o);
    }
    if (!PyArg_ParseTuple(consumer, "OLOO;consumer is (timestamp_type, min_offset, topic, partition)",
                          &o.timestamp_type, &o.min_offset, &o.topic, &o.partition)
        || prepare_layout(&consumer_layout, cls, F_COUNT) < 0) {
        return NULL;
    }
    return read_into_records(buffer, start, end, count, OUT_CONSUMER, &o);
}

static PyMethodDef reader_methods[] = {
    {"walk_records", walk_records, METH_VARARGS, walk_records_doc},
    {"read_records", read_records, METH_VARARGS, read_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef reader_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sdk.records._reader",
    .m_doc = "The record reader of sdk.records._reader_py in C (see that module).",
    .m_size = -1,
    .m_methods = reader_methods,
};

PyMODINIT_FUNC
PyInit__reader(void)
{
    PyObject *errors = PyImport_ImportModule("sdk.records.errors");
    if (errors == NULL) {
        return NULL;
    }
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    InvalidRecordCountError = PyObject_GetAttrString(errors, "InvalidRecordCountError");
    InvalidVarintError = PyObject_GetAttrString(errors, "InvalidVarintError");
    Py_DECREF(errors);
    empty_tuple = PyTuple_New(0);
    if (!InvalidRecordError || !InvalidRecordCountError || !InvalidVarintError || !empty_tuple) {
        return NULL;
    }
    return PyModule_Create(&reader_module);
}
