/*
 * sdk.records._walk: the record walk of sdk/records/walker.py, in C.
 *
 * Why: validating a produce request means walking every record's framing, and in Python that
 * walk was the largest single part of the reference broker's produce cost (about a sixth of its
 * CPU with 8 partitions), paid per record. Here it costs a few nanoseconds per record.
 *
 * The contract is deliberately one-sided, so that this file never has to reproduce the Python
 * walker's error reporting: walk_records() returns exactly the tuple the Python walk_records()
 * would return, or None, meaning "let the Python walker decide". None is returned for anything
 * that is not a well-formed records section: every error, negative lengths other than -1 (null),
 * varints longer than this reader takes. The Python walker then raises its precise error (or, for
 * the rare valid input refused here, returns the same result more slowly). Every byte read here
 * is bounded by the record's own end, which the Python walker only checks afterwards; a record it
 * accepts never reads past that end, so the bound refuses nothing it would accept.
 * tests/records/test_walker.py checks the two against each other on generated and mutated batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Reads an unsigned varint of at most max_bytes from p[0:limit]; returns its length, 0 if it
 * is longer than max_bytes or runs past limit. Bits beyond 64 are dropped, as Java's long does. */
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

/* A zigzag int32 varint (at most 5 bytes, masked to 32 bits as Java's int arithmetic does).
 * One- and two-byte encodings, nearly every record field, are decoded inline. */
static inline Py_ssize_t
read_varint(const unsigned char *p, Py_ssize_t limit, int64_t *out)
{
    uint64_t u;
    Py_ssize_t n;
    if (limit >= 2 && p[1] < 0x80) {
        if (p[0] < 0x80) {
            u = p[0];
            n = 1;
        }
        else {
            u = (uint64_t)(p[0] & 0x7F) | ((uint64_t)p[1] << 7);
            n = 2;
        }
    }
    else {
        n = read_unsigned(p, limit, 5, &u);
        if (!n) {
            return 0;
        }
        u &= 0xFFFFFFFFu;
    }
    *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return n;
}

/* A zigzag int64 varlong (at most 10 bytes). */
static inline Py_ssize_t
read_varlong(const unsigned char *p, Py_ssize_t limit, int64_t *out)
{
    uint64_t u;
    Py_ssize_t n = read_unsigned(p, limit, 10, &u);
    if (n) {
        *out = (int64_t)((u >> 1) ^ (0 - (u & 1)));
    }
    return n;
}

static int
is_utf8(const unsigned char *p, Py_ssize_t size)
{
    Py_ssize_t i = 0;
    while (i < size && p[i] < 0x80) {
        i++;
    }
    if (i == size) {
        return 1;
    }
    /* Not plain ASCII: the same strict decoder bytes.decode("utf-8") uses. */
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, size, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}

/* Steps over a record's header section at p[0:limit] (limit: the record's end); returns the bytes
 * it takes, or -1 where the Python walker (_read_headers) would raise. */
static Py_ssize_t
skip_headers(const unsigned char *p, Py_ssize_t limit)
{
    int64_t count, size;
    Py_ssize_t pos = read_varint(p, limit, &count);
    if (!pos || count < 0 || count > (limit - pos) / 2) {
        return -1;
    }
    for (int64_t h = 0; h < count; h++) {
        Py_ssize_t n = read_varint(p + pos, limit - pos, &size);
        if (!n) {
            return -1;
        }
        pos += n;
        if (size < 0 || size > limit - pos || !is_utf8(p + pos, (Py_ssize_t)size)) {
            return -1;
        }
        pos += (Py_ssize_t)size;
        n = read_varint(p + pos, limit - pos, &size);
        if (!n) {
            return -1;
        }
        pos += n;
        if (size < 0) {
            continue;
        }
        if (size > limit - pos) {
            return -1;
        }
        pos += (Py_ssize_t)size;
    }
    return pos;
}

/* Walks `count` records that must fill data[start:end] exactly; 0 on success with the facts in
 * the out parameters, -1 where the Python walker would raise (or this reader declines). */
static int
walk(const unsigned char *data, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
     int64_t *min_ts_out, int64_t *max_ts_out, Py_ssize_t *gap_out, Py_ssize_t *null_key_out)
{
    Py_ssize_t pos = start;
    int64_t value;
    /* Locals, not the out parameters: stores through those could alias the data (char) and
     * would keep the compiler from holding them in registers. */
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    Py_ssize_t gap = -1, null_key = -1;
    for (Py_ssize_t index = 0; index < count; index++) {
        Py_ssize_t n = read_varint(data + pos, end - pos, &value);
        if (!n || value < 0 || value > end - pos - n) {
            return -1;
        }
        pos += n;
        Py_ssize_t record_end = pos + (Py_ssize_t)value;
        /* attributes (one byte, unused), then the timestamp delta */
        if (pos >= record_end) {
            return -1;
        }
        pos += 1;
        n = read_varlong(data + pos, record_end - pos, &value);
        if (!n) {
            return -1;
        }
        pos += n;
        if (value < min_ts) {
            min_ts = value;
        }
        if (value > max_ts) {
            max_ts = value;
        }
        /* offset delta */
        n = read_varint(data + pos, record_end - pos, &value);
        if (!n) {
            return -1;
        }
        pos += n;
        if (value != index && gap < 0) {
            gap = index;
        }
        /* key: length (-1 is null), bytes stepped over */
        n = read_varint(data + pos, record_end - pos, &value);
        if (!n || value < -1 || value > record_end - pos - n) {
            return -1;
        }
        pos += n;
        if (value >= 0) {
            pos += (Py_ssize_t)value;
        }
        else if (null_key < 0) {
            null_key = index;
        }
        /* value: the same */
        n = read_varint(data + pos, record_end - pos, &value);
        if (!n || value < -1 || value > record_end - pos - n) {
            return -1;
        }
        pos += n;
        if (value > 0) {
            pos += (Py_ssize_t)value;
        }
        /* headers */
        if (pos >= record_end) {
            return -1;
        }
        if (data[pos] == 0) {
            pos += 1;
        }
        else {
            n = skip_headers(data + pos, record_end - pos);
            if (n < 0) {
                return -1;
            }
            pos += n;
        }
        if (pos != record_end) {
            return -1;
        }
    }
    if (pos != end) {
        return -1;
    }
    *min_ts_out = min_ts;
    *max_ts_out = max_ts;
    *gap_out = gap;
    *null_key_out = null_key;
    return 0;
}

PyDoc_STRVAR(walk_records_doc,
"walk_records(data, start, end, count) -> (count, min_ts_delta, max_ts_delta, first_offset_gap,\n"
"first_null_key) or None\n\n"
"The result sdk.records.walker.walk_records returns for the same arguments, or None where that\n"
"function would raise or this one declines; the caller then asks the Python walker.");

static PyObject *
walk_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "walk_records expects (data, start, end, count)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not a contiguous buffer: the Python walker reads it */
        Py_RETURN_NONE;
    }
    int64_t min_ts = 0, max_ts = 0;
    Py_ssize_t gap = -1, null_key = -1;
    int status = -1;
    if (count >= 0 && 0 <= start && start <= end && end <= view.len) {
        status = walk((const unsigned char *)view.buf, start, end, count, &min_ts, &max_ts, &gap,
                      &null_key);
    }
    PyBuffer_Release(&view);
    if (status < 0) {
        Py_RETURN_NONE;
    }
    if (count == 0) {
        return Py_BuildValue("(nOOnn)", (Py_ssize_t)0, Py_None, Py_None, (Py_ssize_t)-1,
                             (Py_ssize_t)-1);
    }
    return Py_BuildValue("(nLLnn)", count, (long long)min_ts, (long long)max_ts, gap, null_key);
}

static PyMethodDef walk_methods[] = {
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL, walk_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walk_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sdk.records._walk",
    .m_doc = "The record walk of sdk.records.walker in C (see that module).",
    .m_size = 0,
    .m_methods = walk_methods,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModuleDef_Init(&walk_module);
}
