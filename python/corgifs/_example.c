/* corgifs._example: tf.train.Example decoding in C, the fast path of
 * corgifs.tfrecord.parse_example / decode_example.
 *
 * It follows the pure-Python decoder of tfrecord.py rule for rule (the
 * test compares them on every feature kind): an Example's Features map
 * entries in order, the last entry of a name winning; in a Feature, lists
 * of the same kind concatenated and a list of another kind replacing the
 * earlier ones; packed and unpacked numbers; unknown fields skipped; a
 * malformed message raises ValueError. Numbers are copied once, straight
 * into the numpy array that is returned (or, from a payload given away,
 * floats not copied at all: see decode), which is what makes it fast: the
 * protobuf runtime would hand back a repeated container that costs one
 * Python object per value to turn into an array.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *b;
    Py_ssize_t n;
} buf_t;

static int fail(const char *msg) {
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
}

/* Reads a varint at *i (not past end); -1 with ValueError when malformed. */
static int varint(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, uint64_t *out) {
    uint64_t r = 0;
    int shift = 0;
    for (;;) {
        if (*i >= end)
            return fail("truncated varint");
        uint8_t c = b[(*i)++];
        if (shift < 64)
            r |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80)
            break;
        shift += 7;
        if (shift >= 70)
            return fail("varint too long");
    }
    *out = r;
    return 0;
}

/* Skips the value of a field of wire type `wire` starting at *i. */
static int skip(const uint8_t *b, Py_ssize_t *i, int wire, Py_ssize_t end) {
    uint64_t v;
    switch (wire) {
    case 0:
        if (varint(b, i, end, &v) < 0)
            return -1;
        break;
    case 2:
        if (varint(b, i, end, &v) < 0)
            return -1;
        if (v > (uint64_t)(end - *i))
            return fail("field runs past its message");
        *i += (Py_ssize_t)v;
        break;
    case 1:
        *i += 8;
        break;
    case 5:
        *i += 4;
        break;
    default:
        PyErr_Format(PyExc_ValueError, "unsupported wire type %d at byte %zd", wire, *i);
        return -1;
    }
    if (*i > end)
        return fail("field runs past its message");
    return 0;
}

/* The span of a length-delimited value whose length is at *i. */
static int span(const uint8_t *b, Py_ssize_t *i, Py_ssize_t end, Py_ssize_t *s, Py_ssize_t *e) {
    uint64_t n;
    if (varint(b, i, end, &n) < 0)
        return -1;
    if (n > (uint64_t)(end - *i))
        return fail("field runs past its message");
    *s = *i;
    *e = *i + (Py_ssize_t)n;
    *i = *e;
    return 0;
}

/* Where a feature's float values sit in the payload: a run of one packed
 * list (pieces == 1) is a contiguous span from start that an array can view. */
typedef struct {
    int pieces;
    Py_ssize_t start;
} floats_t;

/* Walks the list b[i:end] of kind (1 bytes, 2 float, 3 int64). With out ==
 * NULL it counts the values into *count (and the float pieces into *fl);
 * else it stores them from out's index *count on (out is a float32/int64
 * array or a list). */
static int list_values(const uint8_t *b, Py_ssize_t i, Py_ssize_t end, int kind, Py_ssize_t *count, PyObject *out,
                       floats_t *fl) {
    while (i < end) {
        uint64_t key;
        if (varint(b, &i, end, &key) < 0)
            return -1;
        if (key == 0x0A) {
            Py_ssize_t s, e;
            if (span(b, &i, end, &s, &e) < 0)
                return -1;
            if (kind == 1) {
                if (out) {
                    PyObject *v = PyBytes_FromStringAndSize((const char *)b + s, e - s);
                    if (!v)
                        return -1;
                    PyList_SET_ITEM(out, *count, v);
                }
                (*count)++;
            } else if (kind == 2) {
                if ((e - s) % 4)
                    return fail("packed floats whose length is not a multiple of 4");
                if (out)
                    memcpy((float *)PyArray_DATA((PyArrayObject *)out) + *count, b + s, (size_t)(e - s));
                else if (fl && fl->pieces++ == 0)
                    fl->start = s;
                *count += (e - s) / 4;
            } else {
                int64_t *dst = out ? (int64_t *)PyArray_DATA((PyArrayObject *)out) : NULL;
                while (s < e) {
                    uint64_t v;
                    if (b[s] < 0x80) {
                        v = b[s++];
                    } else if (varint(b, &s, e, &v) < 0) {
                        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
                            PyErr_Clear();
                            return fail("packed varints run past their list");
                        }
                        return -1;
                    }
                    if (dst)
                        dst[*count] = (int64_t)v;
                    (*count)++;
                }
            }
        } else if (key == 0x0D && kind == 2) {
            if (i + 4 > end)
                return fail("field runs past its message");
            if (out)
                memcpy((float *)PyArray_DATA((PyArrayObject *)out) + *count, b + i, 4);
            else if (fl)
                fl->pieces += 2; /* unpacked: copied */
            (*count)++;
            i += 4;
        } else if (key == 0x08 && kind == 3) {
            uint64_t v;
            if (varint(b, &i, end, &v) < 0)
                return -1;
            if (out)
                ((int64_t *)PyArray_DATA((PyArrayObject *)out))[*count] = (int64_t)v;
            (*count)++;
        } else if (skip(b, &i, (int)(key & 7), end) < 0) {
            return -1;
        }
    }
    return 0;
}

static const char *kind_names[] = {NULL, "bytes", "float", "int64"};

/* A float array of count values viewing b + start, kept alive by *base (a
 * memoryview of payload made at the first view: it holds a buffer export,
 * so a bytearray cannot be resized under the arrays). */
static PyObject *float_view(const uint8_t *b, Py_ssize_t start, Py_ssize_t count, PyObject *payload, PyObject **base) {
    if (!*base && !(*base = PyMemoryView_FromObject(payload)))
        return NULL;
    npy_intp dims[1] = {count};
    /* numpy sets the aligned flag from the address; torch takes unaligned
     * arrays too (test_decode.py collates them). */
    PyObject *out = PyArray_NewFromDescr(&PyArray_Type, PyArray_DescrFromType(NPY_FLOAT32), 1, dims, NULL,
                                         (void *)(b + start), NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE, NULL);
    if (!out)
        return NULL;
    Py_INCREF(*base);
    if (PyArray_SetBaseObject((PyArrayObject *)out, *base) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* The kind and values of the Feature b[s:e]: *kind 0 (empty) with an empty
 * list, or 1..3 with a list of bytes or a numpy array. With payload (a
 * writable buffer the caller gives away), a float list packed in one piece
 * is returned as a view of it instead of a copy. */
static PyObject *feature(const uint8_t *b, Py_ssize_t s, Py_ssize_t e, int *kind, PyObject *payload, PyObject **base) {
    /* Pass 1: the last list's kind, where its run (lists of that kind since
     * the last list of another kind) starts, and how many values it holds. */
    Py_ssize_t i = s, run = s, count = 0;
    floats_t fl = {0, 0};
    *kind = 0;
    while (i < e) {
        Py_ssize_t at = i;
        uint64_t key;
        if (varint(b, &i, e, &key) < 0)
            return NULL;
        int field = (int)(key >> 3);
        if ((key & 7) == 2 && field >= 1 && field <= 3) {
            Py_ssize_t ls, le;
            if (span(b, &i, e, &ls, &le) < 0)
                return NULL;
            if (field != *kind) {
                *kind = field;
                run = at;
                count = 0;
                fl.pieces = 0;
            }
            if (list_values(b, ls, le, field, &count, NULL, &fl) < 0)
                return NULL;
        } else if (skip(b, &i, (int)(key & 7), e) < 0) {
            return NULL;
        }
    }
    if (*kind == 0)
        return PyList_New(0);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ /* else the floats need a byte swap */
    if (*kind == 2 && payload && fl.pieces == 1)
        return float_view(b, fl.start, count, payload, base);
#endif
    PyObject *out;
    if (*kind == 1) {
        out = PyList_New(count);
    } else {
        npy_intp dims[1] = {count};
        out = PyArray_SimpleNew(1, dims, *kind == 2 ? NPY_FLOAT32 : NPY_INT64);
    }
    if (!out)
        return NULL;
    /* Pass 2: fill from the run's start; its lists are all of *kind. */
    Py_ssize_t filled = 0;
    i = run;
    while (i < e) {
        uint64_t key;
        varint(b, &i, e, &key); /* checked in pass 1 */
        if ((key & 7) == 2 && (int)(key >> 3) == *kind) {
            Py_ssize_t ls = 0, le = 0;
            span(b, &i, e, &ls, &le);
            if (list_values(b, ls, le, *kind, &filled, out, NULL) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        } else {
            skip(b, &i, (int)(key & 7), e);
        }
    }
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    if (*kind == 2) { /* the wire holds little-endian floats */
        uint32_t *p = (uint32_t *)PyArray_DATA((PyArrayObject *)out);
        for (Py_ssize_t k = 0; k < count; k++)
            p[k] = __builtin_bswap32(p[k]);
    }
#endif
    return out;
}

/* Decodes an Example into a new dict: {name: (kind, values)} when tuples,
 * else {name: values} with a single bytes value unwrapped.
 *
 * A bytearray or a writable memoryview payload is taken as given away to
 * the result (tfrecord.read_tfrecords(writable=True) yields a fresh one per
 * record): float lists are then writable arrays viewing it, no copy, which
 * at 100 KiB records is most of the decoding time. Other payloads (bytes,
 * read-only buffers) are copied from, as the arrays must be writable for
 * torch's default_collate. */
static PyObject *decode(PyObject *payload, PyObject *names, int tuples) {
    Py_buffer view;
    PyObject *base = NULL;
    int give = PyByteArray_CheckExact(payload) || (PyMemoryView_Check(payload) && !PyMemoryView_GET_BUFFER(payload)->readonly);
    if (PyObject_GetBuffer(payload, &view, give ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = view.buf;
    Py_ssize_t n = view.len, i = 0;
    PyObject *out = PyDict_New();
    if (!out)
        goto error;
    while (i < n) { /* Example */
        uint64_t key;
        if (varint(b, &i, n, &key) < 0)
            goto error;
        if (key != 0x0A) {
            if (skip(b, &i, (int)(key & 7), n) < 0)
                goto error;
            continue;
        }
        Py_ssize_t fs, fe;
        if (span(b, &i, n, &fs, &fe) < 0)
            goto error;
        Py_ssize_t j = fs;
        while (j < fe) { /* Features */
            if (varint(b, &j, fe, &key) < 0)
                goto error;
            if (key != 0x0A) {
                if (skip(b, &j, (int)(key & 7), fe) < 0)
                    goto error;
                continue;
            }
            Py_ssize_t es, ee;
            if (span(b, &j, fe, &es, &ee) < 0)
                goto error;
            Py_ssize_t k = es, ns = -1, ne = -1, vs = 0, ve = 0;
            while (k < ee) { /* entry: string key = 1; Feature value = 2 */
                if (varint(b, &k, ee, &key) < 0)
                    goto error;
                if (key == 0x0A) {
                    if (span(b, &k, ee, &ns, &ne) < 0)
                        goto error;
                } else if (key == 0x12) {
                    if (span(b, &k, ee, &vs, &ve) < 0)
                        goto error;
                } else if (skip(b, &k, (int)(key & 7), ee) < 0) {
                    goto error;
                }
            }
            if (ns < 0)
                continue; /* an entry without a name: nothing to key it by */
            PyObject *name = PyUnicode_DecodeUTF8((const char *)b + ns, ne - ns, NULL);
            if (!name)
                goto error;
            if (names != Py_None) {
                int in = PySequence_Contains(names, name);
                if (in <= 0) {
                    Py_DECREF(name);
                    if (in < 0)
                        goto error;
                    continue;
                }
            }
            int kind;
            PyObject *v = feature(b, vs, ve, &kind, give ? payload : NULL, &base);
            if (!v) {
                Py_DECREF(name);
                goto error;
            }
            PyObject *item;
            if (tuples) {
                PyObject *kn = kind ? PyUnicode_FromString(kind_names[kind]) : (Py_INCREF(Py_None), Py_None);
                item = kn ? PyTuple_Pack(2, kn, v) : NULL;
                Py_XDECREF(kn);
                Py_DECREF(v);
            } else if (kind == 1 && PyList_GET_SIZE(v) == 1) {
                item = PyList_GET_ITEM(v, 0);
                Py_INCREF(item);
                Py_DECREF(v);
            } else {
                item = v;
            }
            int r = item ? PyDict_SetItem(out, name, item) : -1;
            Py_DECREF(name);
            Py_XDECREF(item);
            if (r < 0)
                goto error;
        }
    }
    Py_XDECREF(base);
    PyBuffer_Release(&view);
    return out;
error:
    Py_XDECREF(out);
    Py_XDECREF(base);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *py_parse_example(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"payload", "names", NULL};
    PyObject *payload, *names = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:parse_example", kwlist, &payload, &names))
        return NULL;
    return decode(payload, names, 1);
}

static PyObject *py_decode_example(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"payload", "names", NULL};
    PyObject *payload, *names = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:decode_example", kwlist, &payload, &names))
        return NULL;
    return decode(payload, names, 0);
}

static PyMethodDef methods[] = {
    {"parse_example", (PyCFunction)(void (*)(void))py_parse_example, METH_VARARGS | METH_KEYWORDS,
     "parse_example(payload, names=None): as corgifs.tfrecord.parse_example_pure, in C."},
    {"decode_example", (PyCFunction)(void (*)(void))py_decode_example, METH_VARARGS | METH_KEYWORDS,
     "decode_example(payload, names=None): as corgifs.tfrecord.decode_example_pure, in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_example", "Fast tf.train.Example decoding.", -1, methods};

PyMODINIT_FUNC PyInit__example(void) {
    import_array();
    return PyModule_Create(&module);
}
