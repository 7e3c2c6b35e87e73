/* The per-record paths in C: record.read_records (the consumer's) with the same contract, for
 * the records of an uncompressed or decompressed v2 batch, and record.encode_records (the
 * producer's). Python's versions stay the reference (and what runs where this module could
 * not be built); tests/broker/records/test_compiled_records.py checks they agree, on valid and
 * corrupted input alike.
 *
 * Every read is bounds-checked against the records' region, so a corrupt or hostile batch
 * ends in InvalidRecordError, never in a read past the buffer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *invalid_record_error; /* broker.records.errors.InvalidRecordError */
static PyObject *empty_headers;        /* (), which record.NO_HEADERS is too */

static int
invalid(const char *message)
{
    PyErr_SetString(invalid_record_error, message);
    return -1;
}

/* A zig-zag varlong at *pos (below end), as Kafka's ByteUtils.readVarlong: at most 10 bytes,
 * bits past the 64th dropped. */
static int
read_varlong(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t end, int64_t *value)
{
    uint64_t z = 0;
    Py_ssize_t p = *pos;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return invalid("malformed record: truncated varint");
        unsigned char b = data[p++];
        z |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            *pos = p;
            return 0;
        }
    }
    return invalid("malformed record: varint longer than 10 bytes");
}

/* A varint-length-prefixed byte string ending at or before stop: a new bytes object, or
 * None (a new reference) for a negative length. */
static PyObject *
read_bytes(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t stop)
{
    int64_t length;
    if (read_varlong(data, pos, stop, &length) < 0)
        return NULL;
    if (length < 0)
        Py_RETURN_NONE;
    if (length > stop - *pos) {
        invalid("record field runs past the record");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)data + *pos, (Py_ssize_t)length);
    *pos += (Py_ssize_t)length;
    return out;
}

static PyObject *
read_headers(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t stop)
{
    int64_t count;
    if (read_varlong(data, pos, stop, &count) < 0)
        return NULL;
    if (count < 0) {
        PyErr_Format(invalid_record_error, "invalid header count %lld", (long long)count);
        return NULL;
    }
    /* Each header takes at least two bytes: a count past that is corrupt, not a reason to
     * allocate. */
    if (count > (stop - *pos) / 2) {
        invalid("record field runs past the record");
        return NULL;
    }
    PyObject *headers = PyList_New(0);
    if (headers == NULL)
        return NULL;
    for (int64_t i = 0; i < count; i++) {
        PyObject *key = read_bytes(data, pos, stop);
        if (key == NULL)
            goto error;
        if (key == Py_None) {
            Py_DECREF(key);
            invalid("null header key");
            goto error;
        }
        PyObject *value = read_bytes(data, pos, stop);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *name = PyUnicode_DecodeUTF8(
            PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), "strict");
        Py_DECREF(key);
        if (name == NULL) {
            Py_DECREF(value);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                invalid("malformed record: a header key is not UTF-8");
            }
            goto error;
        }
        PyObject *header = PyTuple_Pack(2, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (header == NULL || PyList_Append(headers, header) < 0) {
            Py_XDECREF(header);
            goto error;
        }
        Py_DECREF(header);
    }
    return headers;
error:
    Py_DECREF(headers);
    return NULL;
}

static PyObject *
offset_sum(int64_t base, int64_t delta)
{
    int64_t sum;
    if (__builtin_add_overflow(base, delta, &sum)) {
        invalid("record offset or timestamp out of range");
        return NULL;
    }
    return PyLong_FromLongLong(sum);
}

/* One record at *pos, built by make(offset, timestamp, key, value, headers, attributes). */
static PyObject *
read_record(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t end, PyObject *make,
            int64_t base_offset, int64_t base_timestamp)
{
    int64_t size, timestamp_delta, offset_delta;
    if (read_varlong(data, pos, end, &size) < 0)
        return NULL;
    if (size < 0 || size > end - *pos) {
        PyErr_Format(invalid_record_error, "invalid record size %lld", (long long)size);
        return NULL;
    }
    Py_ssize_t stop = *pos + (Py_ssize_t)size;
    if (*pos >= stop)
        goto mismatch;
    unsigned char attributes = data[(*pos)++];
    if (read_varlong(data, pos, stop, &timestamp_delta) < 0 ||
        read_varlong(data, pos, stop, &offset_delta) < 0)
        return NULL;

    PyObject *args[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    PyObject *record = NULL;
    if ((args[0] = offset_sum(base_offset, offset_delta)) == NULL ||
        (args[1] = offset_sum(base_timestamp, timestamp_delta)) == NULL ||
        (args[2] = read_bytes(data, pos, stop)) == NULL ||
        (args[3] = read_bytes(data, pos, stop)) == NULL)
        goto done;
    if (*pos >= stop) {
        invalid("record size does not match its fields");
        goto done;
    }
    if (data[*pos] == 0) {
        (*pos)++;
        Py_INCREF(empty_headers);
        args[4] = empty_headers;
    }
    else if ((args[4] = read_headers(data, pos, stop)) == NULL)
        goto done;
    if (*pos != stop) {
        invalid("record size does not match its fields");
        goto done;
    }
    if ((args[5] = PyLong_FromLong(attributes)) == NULL)
        goto done;
    record = PyObject_Vectorcall(make, args, 6, NULL);
done:
    for (int i = 0; i < 6; i++)
        Py_XDECREF(args[i]);
    return record;
mismatch:
    invalid("record size does not match its fields");
    return NULL;
}

PyDoc_STRVAR(read_records_doc,
"read_records(data, pos, end, count, make, base_offset=0, base_timestamp=0) -> list\n\n"
"broker.records.record.read_records, compiled: see there.");

static PyObject *
read_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos, end, count;
    long long base_offset = 0, base_timestamp = 0;
    if (nargs < 5 || nargs > 7) {
        PyErr_Format(PyExc_TypeError, "read_records takes 5 to 7 arguments (%zd given)", nargs);
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    end = PyLong_AsSsize_t(args[2]);
    count = PyLong_AsSsize_t(args[3]);
    if (nargs > 5)
        base_offset = PyLong_AsLongLong(args[5]);
    if (nargs > 6)
        base_timestamp = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *make = args[4];

    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within data");
        goto done;
    }
    /* A record takes at least 7 bytes: a count past that is corrupt, not a list to allocate. */
    if (count < 0 || count > (end - pos) / 7 + 1) {
        PyErr_Format(invalid_record_error, "malformed record: %zd records in %zd bytes",
                     count, end - pos);
        goto done;
    }
    out = PyList_New(count);
    if (out == NULL)
        goto done;
    const unsigned char *data = (const unsigned char *)view.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *record = read_record(data, &pos, end, make, base_offset, base_timestamp);
        if (record == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, record);
    }
    if (pos != end) {
        invalid("bytes left over after the last record");
        Py_CLEAR(out);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* -- encoding ------------------------------------------------------------------------------ */

static Py_ssize_t
varlong_size(int64_t value)
{
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static unsigned char *
write_varlong(unsigned char *p, int64_t value)
{
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (z >= 0x80) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

/* A field to write: its bytes (a buffer held until written), or null. */
typedef struct {
    Py_buffer view;
    int held;
} Field;

static int
hold(PyObject *object, Field *field)
{
    field->held = 0;
    if (object == Py_None)
        return 0;
    if (PyObject_GetBuffer(object, &field->view, PyBUF_SIMPLE) < 0)
        return -1;
    field->held = 1;
    return 0;
}

static void
release(Field *field)
{
    if (field->held)
        PyBuffer_Release(&field->view);
    field->held = 0;
}

static Py_ssize_t
field_size(const Field *field)
{
    return field->held ? varlong_size(field->view.len) + field->view.len : 1;
}

static unsigned char *
write_field(unsigned char *p, const Field *field)
{
    if (!field->held)
        return write_varlong(p, -1);
    p = write_varlong(p, field->view.len);
    memcpy(p, field->view.buf, (size_t)field->view.len);
    return p + field->view.len;
}

/* One record, (offset delta, timestamp delta, key, value, headers, attributes), appended to
 * `out` with its length prefix. */
static int
encode_record(PyObject *out, PyObject *record)
{
    PyObject *fields = PySequence_Fast(record, "a record is a tuple of six fields");
    if (fields == NULL)
        return -1;
    int rc = -1;
    PyObject *headers = NULL;
    Field key = {.held = 0}, value = {.held = 0};
    Field *hvalues = NULL;
    const char **hkeys = NULL;
    Py_ssize_t *hkey_sizes = NULL, count = 0;
    if (PySequence_Fast_GET_SIZE(fields) != 6) {
        PyErr_SetString(PyExc_ValueError, "a record is a tuple of six fields");
        goto done;
    }
    PyObject **f = PySequence_Fast_ITEMS(fields);
    /* Each checked at once: a conversion (an __index__) must not run with an error set. */
    int64_t offset_delta = PyLong_AsLongLong(f[0]);
    if (offset_delta == -1 && PyErr_Occurred())
        goto done;
    int64_t timestamp_delta = PyLong_AsLongLong(f[1]);
    if (timestamp_delta == -1 && PyErr_Occurred())
        goto done;
    long attributes = PyLong_AsLong(f[5]);
    if ((attributes == -1 && PyErr_Occurred()) || hold(f[2], &key) < 0 ||
        hold(f[3], &value) < 0)
        goto done;
    headers = PySequence_Fast(f[4], "headers are a sequence of (str, bytes) pairs");
    if (headers == NULL)
        goto done;
    count = PySequence_Fast_GET_SIZE(headers);
    Py_ssize_t body = 1 + varlong_size(timestamp_delta) + varlong_size(offset_delta) +
                      field_size(&key) + field_size(&value) + varlong_size(count);
    if (count > 0) {
        hvalues = PyMem_Calloc((size_t)count, sizeof(Field));
        hkeys = PyMem_Calloc((size_t)count, sizeof(char *));
        hkey_sizes = PyMem_Calloc((size_t)count, sizeof(Py_ssize_t));
        if (hvalues == NULL || hkeys == NULL || hkey_sizes == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(headers, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "a header is a (str, bytes) pair");
            goto done;
        }
        hkeys[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &hkey_sizes[i]);
        if (hkeys[i] == NULL || hold(PyTuple_GET_ITEM(pair, 1), &hvalues[i]) < 0)
            goto done;
        body += varlong_size(hkey_sizes[i]) + hkey_sizes[i] + field_size(&hvalues[i]);
    }
    Py_ssize_t start = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, start + varlong_size(body) + body) < 0)
        goto done;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out) + start;
    p = write_varlong(p, body);
    *p++ = (unsigned char)(attributes & 0xFF);
    p = write_varlong(p, timestamp_delta);
    p = write_varlong(p, offset_delta);
    p = write_field(p, &key);
    p = write_field(p, &value);
    p = write_varlong(p, count);
    for (Py_ssize_t i = 0; i < count; i++) {
        p = write_varlong(p, hkey_sizes[i]);
        memcpy(p, hkeys[i], (size_t)hkey_sizes[i]);
        p = write_field(p + hkey_sizes[i], &hvalues[i]);
    }
    rc = 0;
done:
    release(&key);
    release(&value);
    for (Py_ssize_t i = 0; hvalues != NULL && i < count; i++)
        release(&hvalues[i]);
    PyMem_Free(hvalues);
    PyMem_Free(hkeys);
    PyMem_Free(hkey_sizes);
    Py_XDECREF(headers);
    Py_DECREF(fields);
    return rc;
}

PyDoc_STRVAR(encode_records_doc,
             "encode_records(out, records)\n\n"
             "Append length-prefixed records, each (offset delta, timestamp delta, key, value,\n"
             "headers, attributes), to the bytearray out (see record.encode_records).");

static PyObject *
encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_records(out, records)");
        return NULL;
    }
    if (!PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "encode_records appends to a bytearray");
        return NULL;
    }
    PyObject *iterator = PyObject_GetIter(args[1]);
    if (iterator == NULL)
        return NULL;
    PyObject *record;
    while ((record = PyIter_Next(iterator)) != NULL) {
        int rc = encode_record(args[0], record);
        Py_DECREF(record);
        if (rc < 0) {
            Py_DECREF(iterator);
            return NULL;
        }
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"read_records", (PyCFunction)(void (*)(void))read_records, METH_FASTCALL,
     read_records_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     encode_records_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc, "Record decoding and encoding, compiled (see record.read_records and\n"
                         "record.encode_records).");

static int
exec_module(PyObject *module)
{
    PyObject *errors = PyImport_ImportModule("broker.records.errors");
    if (errors == NULL)
        return -1;
    invalid_record_error = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (invalid_record_error == NULL)
        return -1;
    empty_headers = PyTuple_New(0);
    return empty_headers == NULL ? -1 : 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "broker.records._records", module_doc, 0, methods, slots,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    return PyModuleDef_Init(&module_def);
}
