/*
 * sdk.consumer._decode: the record decoder of sdk/consumer/fetch_records.py, in C.
 *
 * Why: turning fetched bytes into ConsumerRecords is the consumer's hot path; in Python it
 * costs about a microsecond per record, here a fifth of that, which is what puts the consumer
 * above aiokafka's (compiled) getmany rate.
 *
 * The contract is one-sided, as sdk/records/_walk.c's: decode_records() returns exactly the list
 * the Python decode_batch_records() loop would build, or None, meaning "let the Python decoder
 * decide". None is returned for anything that is not a well-formed records section (every
 * error, negative lengths other than -1, over-long varints, header keys that are not UTF-8), so
 * this file never reproduces the Python decoder's error reporting. Every read is bounded by the
 * record's own end. tests/sdk/consumer/test_fetcher_decode.py compares the two.
 *
 * ConsumerRecord is a __slots__ class; its slots are filled directly at the offsets its member
 * descriptors give (found once per class by prepare()), which is what makes a record cheap.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

enum {
    F_TOPIC, F_PARTITION, F_OFFSET, F_TIMESTAMP, F_TIMESTAMP_TYPE, F_KEY, F_VALUE, F_CHECKSUM,
    F_KEY_SIZE, F_VALUE_SIZE, F_HEADERS, F_COUNT
};
static const char *FIELD_NAMES[F_COUNT] = {
    "topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "checksum",
    "serialized_key_size", "serialized_value_size", "headers",
};

static PyTypeObject *record_type = NULL;
static Py_ssize_t field_offsets[F_COUNT];
static PyObject *empty_tuple = NULL;

/* Unsigned varint of at most max_bytes in p[0:limit]: its length, or 0 if longer or cut off. */
static inline Py_ssize_t
read_unsigned(const unsigned char *p, Py_ssize_t limit, int max_bytes, uint64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (Py_ssize_t i = 0; i < limit && i < max_bytes; i++) {
        unsigned char b = p[i];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = result;
            return i + 1;
        }
        shift += 7;
    }
    return 0;
}

/* Zigzag int32 (at most 5 bytes; a fifth byte with bits beyond 32 is declined). */
static inline Py_ssize_t
read_varint(const unsigned char *p, Py_ssize_t limit, int64_t *out)
{
    uint64_t u;
    Py_ssize_t n;
    if (limit >= 1 && p[0] < 0x80) {
        u = p[0];
        n = 1;
    }
    else if (limit >= 2 && p[1] < 0x80) {
        u = (uint64_t)(p[0] & 0x7F) | ((uint64_t)p[1] << 7);
        n = 2;
    }
    else {
        n = read_unsigned(p, limit, 5, &u);
        if (!n || u > 0xFFFFFFFFu) {
            return 0;
        }
    }
    uint32_t v = (uint32_t)u;
    *out = (int64_t)(int32_t)((v >> 1) ^ (0u - (v & 1)));
    return n;
}

/* Zigzag int64 (at most 10 bytes; a tenth byte above 1 is declined). */
static inline Py_ssize_t
read_varlong(const unsigned char *p, Py_ssize_t limit, int64_t *out)
{
    uint64_t u;
    Py_ssize_t n = read_unsigned(p, limit, 10, &u);
    if (!n || (n == 10 && p[9] > 1)) {
        return 0;
    }
    *out = (int64_t)((u >> 1) ^ (0 - (u & 1)));
    return n;
}

static inline void
set_field(PyObject *obj, int field, PyObject *value)
{
    *(PyObject **)((char *)obj + field_offsets[field]) = value;  /* steals the reference */
}

/* Headers section [p, end): a tuple of (str, bytes | None), or NULL with no exception set to
 * decline, or NULL with an exception set on memory errors. */
static PyObject *
read_headers(const unsigned char *p, Py_ssize_t count, const unsigned char **pos, const unsigned char *end)
{
    if (count < 0 || count > (end - *pos) / 2) {
        return NULL;
    }
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL) {
        return NULL;
    }
    const unsigned char *q = *pos;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t size;
        Py_ssize_t n = read_varint(q, end - q, &size);
        if (!n || size < 0 || size > end - q - n) {
            goto decline;
        }
        q += n;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)q, (Py_ssize_t)size, "strict");
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
            }
            goto fail;
        }
        q += size;
        n = read_varint(q, end - q, &size);
        PyObject *value;
        if (!n || size < -1 || (size >= 0 && size > end - q - n)) {
            Py_DECREF(key);
            goto decline;
        }
        q += n;
        if (size < 0) {
            value = Py_NewRef(Py_None);
        }
        else {
            value = PyBytes_FromStringAndSize((const char *)q, (Py_ssize_t)size);
            if (value == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            q += size;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    (void)p;
    *pos = q;
    return headers;
decline:
fail:
    Py_DECREF(headers);
    return NULL;
}

/* prepare(cls): remember cls and the offsets of its slots. */
static PyObject *
prepare(PyObject *self, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "prepare() takes the ConsumerRecord class");
        return NULL;
    }
    for (int i = 0; i < F_COUNT; i++) {
        PyObject *descr = PyObject_GetAttrString(cls, FIELD_NAMES[i]);
        if (descr == NULL) {
            return NULL;
        }
        if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "%s is not a slot", FIELD_NAMES[i]);
            return NULL;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "%s is not an object slot", FIELD_NAMES[i]);
            return NULL;
        }
        field_offsets[i] = member->offset;
        Py_DECREF(descr);
    }
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

/* decode_records(data, start, end, count, base_offset, base_timestamp, fixed_timestamp,
 *                timestamp_type, min_offset, topic, partition) -> list | None */
static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count;
    long long base_offset, base_timestamp, min_offset;
    PyObject *fixed_timestamp, *timestamp_type, *topic, *partition;
    if (!PyArg_ParseTuple(args, "y*nnnLLOOLOO", &view, &start, &end, &count, &base_offset,
                          &base_timestamp, &fixed_timestamp, &timestamp_type, &min_offset, &topic,
                          &partition)) {
        return NULL;
    }
    if (record_type == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "prepare() was not called");
        return NULL;
    }
    if (start < 0 || end > view.len || start > end || count < 0 || count > end - start) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)view.buf;
    const unsigned char *p = base + start;
    const unsigned char *section_end = base + end;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, ts_delta, offset_delta, key_size, value_size, header_count;
        Py_ssize_t n = read_varint(p, section_end - p, &length);
        if (!n || length < 0 || length > section_end - p - n) {
            goto decline;
        }
        p += n;
        const unsigned char *record_end = p + length;
        if (record_end - p < 1) {
            goto decline;
        }
        p += 1;  /* attributes */
        if (!(n = read_varlong(p, record_end - p, &ts_delta))) {
            goto decline;
        }
        p += n;
        if (!(n = read_varint(p, record_end - p, &offset_delta))) {
            goto decline;
        }
        p += n;
        if (!(n = read_varint(p, record_end - p, &key_size)) || key_size < -1) {
            goto decline;
        }
        p += n;
        const unsigned char *key = p;
        if (key_size > 0) {
            if (key_size > record_end - p) {
                goto decline;
            }
            p += key_size;
        }
        if (!(n = read_varint(p, record_end - p, &value_size)) || value_size < -1) {
            goto decline;
        }
        p += n;
        const unsigned char *value = p;
        if (value_size > 0) {
            if (value_size > record_end - p) {
                goto decline;
            }
            p += value_size;
        }
        if (!(n = read_varint(p, record_end - p, &header_count))) {
            goto decline;
        }
        p += n;
        PyObject *headers;
        if (header_count == 0) {
            headers = Py_NewRef(empty_tuple);
        }
        else {
            headers = read_headers(base, (Py_ssize_t)header_count, &p, record_end);
            if (headers == NULL) {
                if (PyErr_Occurred()) {
                    goto fail;
                }
                goto decline;
            }
        }
        if (p != record_end) {
            Py_DECREF(headers);
            goto decline;
        }
        long long offset = base_offset + offset_delta;
        if (offset < min_offset) {
            Py_DECREF(headers);
            continue;
        }
        PyObject *record = record_type->tp_alloc(record_type, 0);
        if (record == NULL) {
            Py_DECREF(headers);
            goto fail;
        }
        set_field(record, F_HEADERS, headers);
        set_field(record, F_TOPIC, Py_NewRef(topic));
        set_field(record, F_PARTITION, Py_NewRef(partition));
        set_field(record, F_TIMESTAMP_TYPE, Py_NewRef(timestamp_type));
        set_field(record, F_CHECKSUM, Py_NewRef(Py_None));
        PyObject *v;
        if (!(v = PyLong_FromLongLong(offset))) goto fail_record;
        set_field(record, F_OFFSET, v);
        if (fixed_timestamp == Py_None) {
            if (!(v = PyLong_FromLongLong(base_timestamp + ts_delta))) goto fail_record;
        }
        else {
            v = Py_NewRef(fixed_timestamp);
        }
        set_field(record, F_TIMESTAMP, v);
        if (key_size < 0) {
            v = Py_NewRef(Py_None);
        }
        else if (!(v = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)key_size))) {
            goto fail_record;
        }
        set_field(record, F_KEY, v);
        if (value_size < 0) {
            v = Py_NewRef(Py_None);
        }
        else if (!(v = PyBytes_FromStringAndSize((const char *)value, (Py_ssize_t)value_size))) {
            goto fail_record;
        }
        set_field(record, F_VALUE, v);
        if (!(v = PyLong_FromLongLong(key_size < 0 ? -1 : key_size))) goto fail_record;
        set_field(record, F_KEY_SIZE, v);
        if (!(v = PyLong_FromLongLong(value_size < 0 ? -1 : value_size))) goto fail_record;
        set_field(record, F_VALUE_SIZE, v);
        if (PyList_Append(out, record) < 0) {
            goto fail_record;
        }
        Py_DECREF(record);
        continue;
    fail_record:
        Py_DECREF(record);
        goto fail;
    }
    if (p != section_end) {
        goto decline;
    }
    PyBuffer_Release(&view);
    return out;
decline:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_O, "Remember the ConsumerRecord class and its slot offsets."},
    {"decode_records", decode_records, METH_VARARGS,
     "ConsumerRecords of a records section, or None to let the Python decoder decide."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "sdk.consumer._decode", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__decode(void)
{
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
