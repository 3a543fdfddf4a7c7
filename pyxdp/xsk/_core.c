// SPDX-License-Identifier: Apache-2.0
/* pyxdp.xsk._core: the per-batch work of receiving and sending on AF_XDP,
 * compiled, so that a batch costs a C call and a loop instead of dozens of
 * numpy calls (pyxdp/xsk/core.py says what calls it and when).
 *
 * Rings: the functions take the address of libxdp's struct xsk_ring_prod or
 * xsk_ring_cons (public ABI, pyxdp/xsk/rings.py builds it) and do what
 * libxdp's inline helpers do: the other side's index is read with a
 * load-acquire before its entries are read, and ours is stored with a
 * store-release after our reads or writes of the entries.
 *
 * Frames: the header parse and frame walk are the per-datagram loops of
 * pyxdp/xsk/batch.py's parse_headers and pyxdp/xsk/frame_arrays.py's
 * walk_frames, byte for byte the same answers (tests hold both to the
 * reference judge): a read past the end of UMEM is clamped to its last
 * byte, as the numpy path clamps it.
 *
 * Sending: the payload copy, its one's-complement sum and the headers of
 * pyxdp/xsk/headers.py's write, per datagram. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ETH_HLEN 14
#define VLAN_HLEN 4
#define MAX_VLAN_TAGS 2
#define IPV6_HLEN 40
#define UDP_HLEN 8
#define IPV4_HLEN 20
#define FRAME_HDR_LEN 5
#define FRAME_TYPES 5 /* valid type bytes are 1..5 */

struct xsk_ring { /* libxdp's struct xsk_ring_prod / xsk_ring_cons */
    uint32_t cached_prod, cached_cons, mask, size;
    uint32_t *producer, *consumer;
    void *ring;
    uint32_t *flags;
};

struct xdp_desc { uint64_t addr; uint32_t len; uint32_t options; };

static struct xsk_ring *ring_at(PyObject *addr)
{
    void *p = PyLong_AsVoidPtr(addr);
    return p ? (struct xsk_ring *)p : NULL;
}

/* --- rings ------------------------------------------------------------------ */

static uint32_t cons_peek(struct xsk_ring *r, uint32_t limit, uint32_t *idx)
{
    uint32_t entries = r->cached_prod - r->cached_cons;
    if (entries == 0) {
        r->cached_prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
        entries = r->cached_prod - r->cached_cons;
    }
    if (entries > limit)
        entries = limit;
    *idx = r->cached_cons;
    r->cached_cons += entries;
    return entries;
}

static void cons_release(struct xsk_ring *r, uint32_t n)
{
    __atomic_store_n(r->consumer, *r->consumer + n, __ATOMIC_RELEASE);
}

static uint32_t prod_free(struct xsk_ring *r, uint32_t wanted)
{
    uint32_t free = r->cached_cons - r->cached_prod;
    if (free >= wanted)
        return free;
    /* libxdp keeps cached_cons one ring size ahead of the kernel's consumer */
    r->cached_cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE) + r->size;
    return r->cached_cons - r->cached_prod;
}

static void prod_submit(struct xsk_ring *r, uint32_t n)
{
    r->cached_prod += n;
    __atomic_store_n(r->producer, *r->producer + n, __ATOMIC_RELEASE);
}

/* rx_take(ring, limit, addr_out: u64[limit], len_out: u32[limit]) -> n */
static PyObject *rx_take(PyObject *self, PyObject *args)
{
    PyObject *ring_addr;
    unsigned int limit;
    Py_buffer a, l;
    if (!PyArg_ParseTuple(args, "OIw*w*", &ring_addr, &limit, &a, &l))
        return NULL;
    struct xsk_ring *r = ring_at(ring_addr);
    uint32_t n = 0, idx;
    if (r && (size_t)a.len >= limit * 8u && (size_t)l.len >= limit * 4u) {
        n = cons_peek(r, limit, &idx);
        const struct xdp_desc *desc = r->ring;
        uint64_t *addr = a.buf;
        uint32_t *len = l.buf;
        for (uint32_t i = 0; i < n; i++) {
            const struct xdp_desc *d = &desc[(idx + i) & r->mask];
            addr[i] = d->addr;
            len[i] = d->len;
        }
        if (n)
            cons_release(r, n);
    } else if (r) {
        PyErr_SetString(PyExc_ValueError, "rx_take: output buffers are shorter than the limit");
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&l);
    return PyErr_Occurred() ? NULL : PyLong_FromUnsignedLong(n);
}

/* comp_take(ring, limit, addr_out: u64[limit]) -> n */
static PyObject *comp_take(PyObject *self, PyObject *args)
{
    PyObject *ring_addr;
    unsigned int limit;
    Py_buffer a;
    if (!PyArg_ParseTuple(args, "OIw*", &ring_addr, &limit, &a))
        return NULL;
    struct xsk_ring *r = ring_at(ring_addr);
    uint32_t n = 0, idx;
    if (r && (size_t)a.len >= limit * 8u) {
        n = cons_peek(r, limit, &idx);
        const uint64_t *entry = r->ring;
        uint64_t *addr = a.buf;
        for (uint32_t i = 0; i < n; i++)
            addr[i] = entry[(idx + i) & r->mask];
        if (n)
            cons_release(r, n);
    } else if (r) {
        PyErr_SetString(PyExc_ValueError, "comp_take: the output buffer is shorter than the limit");
    }
    PyBuffer_Release(&a);
    return PyErr_Occurred() ? NULL : PyLong_FromUnsignedLong(n);
}

/* fill_put(ring, addr: u64[n], mask) -> n, or -1 when there is no room */
static PyObject *fill_put(PyObject *self, PyObject *args)
{
    PyObject *ring_addr;
    unsigned long long mask;
    Py_buffer a;
    if (!PyArg_ParseTuple(args, "Oy*K", &ring_addr, &a, &mask))
        return NULL;
    struct xsk_ring *r = ring_at(ring_addr);
    long n = (long)(a.len / 8);
    if (r) {
        if (prod_free(r, (uint32_t)n) < (uint32_t)n) {
            n = -1;
        } else {
            uint64_t *entry = r->ring;
            const uint64_t *addr = a.buf;
            uint32_t idx = r->cached_prod;
            for (long i = 0; i < n; i++)
                entry[(idx + i) & r->mask] = addr[i] & mask;
            prod_submit(r, (uint32_t)n);
        }
    }
    PyBuffer_Release(&a);
    return PyErr_Occurred() ? NULL : PyLong_FromLong(n);
}

/* tx_put(ring, addr: u64[n], len: u32[n]) -> how many were published */
static PyObject *tx_put(PyObject *self, PyObject *args)
{
    PyObject *ring_addr;
    Py_buffer a, l;
    if (!PyArg_ParseTuple(args, "Oy*y*", &ring_addr, &a, &l))
        return NULL;
    struct xsk_ring *r = ring_at(ring_addr);
    uint32_t n = (uint32_t)(a.len / 8);
    if ((size_t)l.len / 4 < n)
        n = (uint32_t)(l.len / 4);
    if (r) {
        uint32_t room = prod_free(r, n);
        if (room < n)
            n = room;
        struct xdp_desc *desc = r->ring;
        const uint64_t *addr = a.buf;
        const uint32_t *len = l.buf;
        uint32_t idx = r->cached_prod;
        for (uint32_t i = 0; i < n; i++) {
            struct xdp_desc *d = &desc[(idx + i) & r->mask];
            d->addr = addr[i];
            d->len = len[i];
            d->options = 0;
        }
        if (n)
            prod_submit(r, n);
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&l);
    return PyErr_Occurred() ? NULL : PyLong_FromUnsignedLong(n);
}

/* --- receiving: headers and frames ------------------------------------------ */

struct packet {
    const uint8_t *umem;
    size_t umem_len;
    uint64_t addr;
};

static inline uint8_t byte_at(const struct packet *p, uint64_t off)
{
    uint64_t at = p->addr + off;
    return p->umem[at < p->umem_len ? at : p->umem_len - 1];
}

static inline uint32_t be16_at(const struct packet *p, uint64_t off)
{
    return ((uint32_t)byte_at(p, off) << 8) | byte_at(p, off + 1);
}

struct parsed { int v4; int64_t l3, l4, payload_offset, payload_length; };

static void parse(const struct packet *p, uint32_t length, struct parsed *out)
{
    int64_t l3 = ETH_HLEN;
    uint32_t ethertype = be16_at(p, 12);
    for (int i = 0; i < MAX_VLAN_TAGS && (ethertype == 0x8100 || ethertype == 0x88A8); i++) {
        ethertype = be16_at(p, l3 + 2);
        l3 += VLAN_HLEN;
    }
    out->v4 = ethertype == 0x0800;
    out->l3 = l3;
    out->l4 = out->v4 ? l3 + (byte_at(p, l3) & 0xF) * 4 : l3 + IPV6_HLEN;
    int64_t udp_len = be16_at(p, out->l4 + 4);
    int64_t pl = udp_len - UDP_HLEN;
    int64_t room = (int64_t)length - out->l4 - UDP_HLEN;
    if (pl < 0)
        pl = 0;
    if (pl > room) /* as np.clip does when room < 0 too */
        pl = room;
    out->payload_offset = out->l4 + UDP_HLEN;
    out->payload_length = pl;
}

/* headers(umem, addr: u64[n], len: u32[n], out) fills OUT, a buffer of n
 * records of pyxdp.xsk.core.HEADER_RECORD (the same fields, in this order) */
struct header_record {
    int64_t payload_offset, payload_length;
    uint16_t sport, dport;
    uint8_t ip_version;
    uint8_t src[16], dst[16];
    uint8_t pad[3];
};
_Static_assert(sizeof(struct header_record) == 56, "HEADER_RECORD in pyxdp/xsk/core.py");

static PyObject *headers(PyObject *self, PyObject *args)
{
    Py_buffer u, a, l, o;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &u, &a, &l, &o))
        return NULL;
    size_t n = a.len / 8;
    if ((size_t)l.len / 4 < n || (size_t)o.len / sizeof(struct header_record) < n || (n && !u.len)) {
        PyErr_SetString(PyExc_ValueError, "headers: buffers of different lengths");
        n = 0;
    }
    const uint64_t *addr = a.buf;
    const uint32_t *len = l.buf;
    struct header_record *rec = o.buf;
    for (size_t i = 0; i < n; i++) {
        struct packet p = {u.buf, (size_t)u.len, addr[i]};
        struct parsed h;
        parse(&p, len[i], &h);
        struct header_record *r = &rec[i];
        memset(r, 0, sizeof(*r));
        r->ip_version = h.v4 ? 4 : 6;
        int64_t src = h.v4 ? h.l3 + 12 : h.l3 + 8, dst = h.v4 ? h.l3 + 16 : h.l3 + 24;
        int width = h.v4 ? 4 : 16;
        for (int k = 0; k < width; k++) {
            r->src[k] = byte_at(&p, src + k);
            r->dst[k] = byte_at(&p, dst + k);
        }
        r->sport = (uint16_t)be16_at(&p, h.l4);
        r->dport = (uint16_t)be16_at(&p, h.l4 + 2);
        r->payload_offset = h.payload_offset;
        r->payload_length = h.payload_length;
    }
    PyBuffer_Release(&u);
    PyBuffer_Release(&a);
    PyBuffer_Release(&l);
    PyBuffer_Release(&o);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

/* The walk of one payload [at, stop): appends its frames to the columns at
 * index *k and returns 1, or leaves *k as it was and returns 0 (broken). */
static int walk_one(const uint8_t *umem, int64_t umem_len, int64_t at, int64_t stop,
                    int max_frames, int64_t datagram, int64_t *dg, int64_t *off, int64_t *len,
                    uint8_t *type, size_t *k)
{
    size_t first = *k;
    int64_t last_header = umem_len - FRAME_HDR_LEN;
    if (stop > umem_len)
        stop = umem_len;
    for (int step = 0; step < max_frames; step++) {
        int64_t read = at < last_header ? at : last_header;
        const uint8_t *h = umem + read;
        int64_t length = ((int64_t)h[0] << 24) | (h[1] << 16) | (h[2] << 8) | h[3];
        uint8_t t = h[4];
        int64_t after = at + FRAME_HDR_LEN + length;
        if (after > stop || (uint8_t)(t - 1) >= FRAME_TYPES) {
            *k = first;
            return 0;
        }
        dg[*k] = datagram;
        off[*k] = at + FRAME_HDR_LEN;
        len[*k] = length;
        type[*k] = t;
        (*k)++;
        if (after >= stop)
            return 1;
        at = after;
    }
    *k = first; /* bytes left after max_frames frames: too_many_frames */
    return 0;
}

/* frames(umem, addr: u64[n], len: u32[n], max_frames) -> (columns, count,
 * broken): the frames of every datagram, in COLUMNS, a bytearray holding
 * datagram i64[count], offset i64[count], length i64[count], type u8[count];
 * BROKEN a bytearray of the i64 indexes of datagrams left out. */
static PyObject *frames(PyObject *self, PyObject *args)
{
    Py_buffer u, a, l;
    int max_frames;
    if (!PyArg_ParseTuple(args, "y*y*y*i", &u, &a, &l, &max_frames))
        return NULL;
    PyObject *result = NULL, *cols = NULL, *broken = NULL;
    size_t n = a.len / 8, cap = n * (size_t)max_frames, k = 0, nbroken = 0;
    if ((size_t)l.len / 4 < n || (n && u.len < FRAME_HDR_LEN) || max_frames < 1) {
        PyErr_SetString(PyExc_ValueError, "frames: bad buffers");
        goto out;
    }
    /* One allocation at the most frames there can be, cut to size after. */
    cols = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(cap * 25));
    broken = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    if (!cols || !broken)
        goto out;
    char *base = PyByteArray_AS_STRING(cols);
    int64_t *dg = (int64_t *)base, *off = dg + cap, *len = off + cap;
    uint8_t *type = (uint8_t *)(len + cap);
    int64_t *bad = (int64_t *)PyByteArray_AS_STRING(broken);
    const uint64_t *addr = a.buf;
    const uint32_t *plen = l.buf;
    for (size_t i = 0; i < n; i++) {
        struct packet p = {u.buf, (size_t)u.len, addr[i]};
        struct parsed h;
        parse(&p, plen[i], &h);
        int64_t start = (int64_t)addr[i] + h.payload_offset;
        if (!walk_one(u.buf, u.len, start, start + h.payload_length, max_frames, (int64_t)i,
                      dg, off, len, type, &k))
            bad[nbroken++] = (int64_t)i;
    }
    /* Close the columns up: each moves down to follow the one before. */
    memmove(dg + k, off, k * 8);
    memmove(dg + 2 * k, len, k * 8);
    memmove((uint8_t *)(dg + 3 * k), type, k);
    if (PyByteArray_Resize(cols, (Py_ssize_t)(k * 25)) < 0 ||
        PyByteArray_Resize(broken, (Py_ssize_t)(nbroken * 8)) < 0)
        goto out;
    result = Py_BuildValue("(OnO)", cols, (Py_ssize_t)k, broken);
out:
    Py_XDECREF(cols);
    Py_XDECREF(broken);
    PyBuffer_Release(&u);
    PyBuffer_Release(&a);
    PyBuffer_Release(&l);
    return result;
}

/* views(umem_view, types, columns, count) -> [(type, memoryview)]: the
 * frames of a frames() result as FrameArrays' iteration yields them, each
 * payload a slice of UMEM_VIEW (so it keeps the UMEM alive), TYPES the
 * FrameType by type byte. */
static PyObject *views(PyObject *self, PyObject *args)
{
    PyObject *umem_view, *types;
    Py_buffer cols;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OO!y*n", &umem_view, &PyTuple_Type, &types, &cols, &k))
        return NULL;
    PyObject *list = NULL;
    if (k < 0 || cols.len < k * 25) {
        PyErr_SetString(PyExc_ValueError, "views: the columns are shorter than the count");
        goto out;
    }
    const int64_t *off = (const int64_t *)cols.buf + k, *len = off + k;
    const uint8_t *type = (const uint8_t *)(len + k);
    list = PyList_New(k);
    for (Py_ssize_t j = 0; list && j < k; j++) {
        PyObject *view = NULL, *pair = NULL;
        PyObject *start = PyLong_FromLongLong(off[j]);
        PyObject *stop = start ? PyLong_FromLongLong(off[j] + len[j]) : NULL;
        PyObject *slice = stop ? PySlice_New(start, stop, NULL) : NULL;
        if (slice)
            view = PyObject_GetItem(umem_view, slice);
        if (view && type[j] < PyTuple_GET_SIZE(types))
            pair = PyTuple_Pack(2, PyTuple_GET_ITEM(types, type[j]), view);
        else if (view)
            PyErr_SetString(PyExc_ValueError, "views: a type byte past the types");
        Py_XDECREF(start);
        Py_XDECREF(stop);
        Py_XDECREF(slice);
        Py_XDECREF(view);
        if (!pair)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, j, pair);
    }
out:
    PyBuffer_Release(&cols);
    return list;
}

/* --- sending ---------------------------------------------------------------- */

static inline uint64_t word_sum(const uint8_t *b, size_t n)
{
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 1 < n; i += 2)
        s += ((uint32_t)b[i] << 8) | b[i + 1];
    if (i < n)
        s += (uint32_t)b[i] << 8;
    return s;
}

static inline uint32_t fold(uint64_t total) /* (total - 1) % 0xFFFF + 1, total > 0 */
{
    return (uint32_t)((total - 1) % 0xFFFF + 1);
}

static inline void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* tx_write(umem, addr: u64[n], rows, width, len: i64[n], header, version,
 * ip_sum, udp_sum, frame_len_out: u32[n]): payload i (the first len[i]
 * bytes of row i of ROWS, WIDTH bytes a row) copied behind the headers at
 * addr[i], and the headers written with their lengths and checksums. */
static PyObject *tx_write(PyObject *self, PyObject *args)
{
    Py_buffer u, a, rows, l, hdr, o;
    Py_ssize_t width;
    int version;
    unsigned long long ip_sum, udp_sum;
    if (!PyArg_ParseTuple(args, "w*y*y*ny*y*iKKw*", &u, &a, &rows, &width, &l, &hdr, &version,
                          &ip_sum, &udp_sum, &o))
        return NULL;
    size_t n = a.len / 8, hl = (size_t)hdr.len;
    if ((size_t)l.len / 8 < n || (size_t)o.len / 4 < n || (size_t)rows.len < n * (size_t)width
        || hl < ETH_HLEN + UDP_HLEN) {
        PyErr_SetString(PyExc_ValueError, "tx_write: buffers of different lengths");
        n = 0;
    }
    const uint64_t *addr = a.buf;
    const int64_t *len = l.buf;
    uint32_t *frame_len = o.buf;
    uint8_t *umem = u.buf;
    for (size_t i = 0; i < n; i++) {
        int64_t pl = len[i];
        if (pl < 0 || pl > width || addr[i] + hl + (uint64_t)pl > (uint64_t)u.len) {
            PyErr_Format(PyExc_ValueError, "tx_write: datagram %zd does not fit", (Py_ssize_t)i);
            break;
        }
        uint8_t *frame = umem + addr[i];
        memcpy(frame + hl, (const uint8_t *)rows.buf + i * (size_t)width, (size_t)pl);
        memcpy(frame, hdr.buf, hl);
        uint32_t udp_len = (uint32_t)pl + UDP_HLEN;
        uint8_t *udp = frame + hl - UDP_HLEN;
        if (version == 4) {
            uint32_t total = udp_len + IPV4_HLEN;
            put16(frame + ETH_HLEN + 2, total);
            put16(frame + ETH_HLEN + 10, ~fold(ip_sum + total) & 0xFFFF);
        } else {
            put16(frame + ETH_HLEN + 4, udp_len);
        }
        uint32_t check = ~fold(udp_sum + 2 * (uint64_t)udp_len + word_sum(frame + hl, (size_t)pl))
                         & 0xFFFF;
        put16(udp + 4, udp_len);
        put16(udp + 6, check ? check : 0xFFFF);
        frame_len[i] = (uint32_t)(hl + (size_t)pl);
    }
    PyBuffer_Release(&u);
    PyBuffer_Release(&a);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&l);
    PyBuffer_Release(&hdr);
    PyBuffer_Release(&o);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
    {"rx_take", rx_take, METH_VARARGS, "Up to LIMIT RX descriptors, copied out and released."},
    {"comp_take", comp_take, METH_VARARGS, "Up to LIMIT completed addresses, copied and released."},
    {"fill_put", fill_put, METH_VARARGS, "Publish chunk addresses on the fill ring."},
    {"tx_put", tx_put, METH_VARARGS, "Publish TX descriptors, as many as fit."},
    {"headers", headers, METH_VARARGS, "Parse the header stacks of a batch into records."},
    {"frames", frames, METH_VARARGS, "Walk the token frames of a batch."},
    {"views", views, METH_VARARGS, "The (type, payload view) pairs of a frames() result."},
    {"tx_write", tx_write, METH_VARARGS, "Write payloads and headers of a batch to send."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_core", .m_size = -1,
                                    .m_methods = methods};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModule_Create(&module);
}
