/* torch.distributed.checkpoint (DCP) directories: `.metadata` is a pickle
 * (protocol 4 or 5) of a Metadata dataclass that gives, for every tensor, its
 * global size and chunks (offsets and sizes), and for every chunk the file
 * (__R_N.distcp) and byte range that hold it. A chunk is a torch.save zip of
 * the local tensor, or (serialization_format=SAFETENSORS) the entry named by
 * the tensor's name in the safetensors blob that starts at that offset. Chunks become pieces placed at their global offsets, so a tensor's
 * digest is the same whatever number of ranks wrote it. Non-tensor items
 * (BytesStorageMetadata) are torch.save'd objects: their scalars become
 * values named by their fully qualified name. What .metadata states and the
 * storage states too (dtype, chunk shapes and lengths, the chunks' cover of
 * the global shape, the storage index) must agree: DCP's loaders build the
 * tensor from .metadata, so the chunks' word alone is never taken.
 * Megatron-Core's torch_dist adds mcore_data to the Metadata: flattened-range
 * tensors are reported in their parameter's shape and master weights under
 * one name (mcore_flat.c). */
#include "formats/readers.h"

#include <jansson.h>

#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *fqn;
    int nd;             /* -1: no offset (bytes item) */
    uint64_t off[DCK_MAX_DIMS];
    const char *path;
    uint64_t offset, length;
    bool used;          /* named by an item of state_dict_metadata */
} sd_entry;

typedef struct {
    char *rel;          /* relative_path */
    uint32_t file;
    const uint8_t *data;
    uint64_t len;
} dcp_file;

typedef struct {
    dck_checkpoint *ck;
    const char *dir, *relroot, *label;
    dcp_file *files;
    size_t nfiles, cap_files;
    dck_memfile mem;
} dcp_ctx;

static int cmp_sd(const void *a, const void *b) {
    const sd_entry *x = a, *y = b;
    int c = strcmp(x->fqn, y->fqn);
    if (c) return c;
    if (x->nd != y->nd) return x->nd < y->nd ? -1 : 1;
    for (int i = 0; i < x->nd; i++)
        if (x->off[i] != y->off[i]) return x->off[i] < y->off[i] ? -1 : 1;
    return 0;
}

static bool safe_rel(const char *p) {
    if (!*p || *p == '/') return false;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if ((l == 2 && !strncmp(s, "..", 2)) || l == 0) return false;
        if (!e) break;
        s = e + 1;
    }
    return true;
}

/* Opens (once) a file of the checkpoint directory; tries NAME then NAME.zst. */
static dck_status get_file(dcp_ctx *c, const char *rel, dcp_file **out) {
    for (size_t i = 0; i < c->nfiles; i++)
        if (!strcmp(c->files[i].rel, rel)) {
            *out = &c->files[i];
            return DCK_OK;
        }
    if (!safe_rel(rel))
        return dck_set_error(DCK_ERR_FORMAT, "%s: .metadata names the file %s outside the checkpoint", c->dir, rel);
    char *p = dck_path_join(c->dir, rel);
    char *r = dck_rel_join(c->relroot, rel);
    if (!p || !r) {
        free(p);
        free(r);
        return dck_oom(NULL);
    }
    struct stat st;
    if (stat(p, &st) != 0) {
        size_t l = strlen(p);
        char *pz = malloc(l + 5), *rz = malloc(strlen(r) + 5);
        if (pz && rz) {
            snprintf(pz, l + 5, "%s.zst", p);
            snprintf(rz, strlen(r) + 5, "%s.zst", r);
            if (stat(pz, &st) == 0) {
                free(p);
                free(r);
                p = pz;
                r = rz;
                pz = rz = NULL;
            }
        }
        free(pz);
        free(rz);
    }
    dck_file *f;
    dck_status s = dck_file_open(p, r, &f);
    free(p);
    free(r);
    if (s) return s;
    uint32_t idx;
    if ((s = dck_ck_add_file(c->ck, f, &idx))) return s;
    const uint8_t *d;
    uint64_t len;
    if ((s = dck_file_map(f, &d, &len))) return s;
    if ((s = dck_grow((void **)&c->files, &c->cap_files, c->nfiles + 1, sizeof *c->files))) return s;
    dcp_file *df = &c->files[c->nfiles];
    if (!(df->rel = dck_strdup(rel))) return dck_oom(NULL);
    c->nfiles++;
    df->file = idx;
    df->data = d;
    df->len = len;
    *out = df;
    return DCK_OK;
}

/* A tuple of at most DCK_MAX_DIMS non-negative integers (a size or an
 * offset): true and its values, or false (the caller says which one). */
static bool tuple_u64(const pk_node *n, int *nd, uint64_t *out) {
    size_t k;
    pk_node **it = dck_pk_items(n, &k);
    if (!it || k > DCK_MAX_DIMS) return false;
    for (size_t i = 0; i < k; i++) {
        int64_t v;
        if (!dck_pk_int(it[i], &v) || v < 0) return false;
        out[i] = (uint64_t)v;
    }
    *nd = (int)k;
    return true;
}

static int dtype_of_props(const pk_node *props) {
    const pk_node *d = dck_pk_get(props, "dtype");
    if (!d && props && props->kind == PK_OBJECT && props->u.obj.state) {
        size_t k;
        pk_node **it = dck_pk_items(props->u.obj.state, &k);
        if (k >= 1) d = it[0];
    }
    if (!d || d->kind != PK_GLOBAL) return -1;
    return dck_pk_torch_dtype(d->u.global.name);
}

static const char *dtype_name_of_props(const pk_node *props) {
    const pk_node *d = dck_pk_get(props, "dtype");
    if (!d && props && props->kind == PK_OBJECT && props->u.obj.state) {
        size_t k;
        pk_node **it = dck_pk_items(props->u.obj.state, &k);
        if (k >= 1) d = it[0];
    }
    return d && d->kind == PK_GLOBAL ? d->u.global.name : "?";
}

/* The storage_data length of a torch.save item is the zip's own (the writer
 * takes it from the stream): the bytes end with the zip's end record (22
 * bytes and its comment). A length that runs past it (the zip reader would
 * take the excess for slack) is a length that disagrees with the item. */
static bool zip_ends_at(const uint8_t *d, uint64_t len) {
    for (uint64_t c = 0; c <= 0xffff && c + 22 <= len; c++) {
        const uint8_t *e = d + len - 22 - c;
        if (e[0] == 'P' && e[1] == 'K' && e[2] == 5 && e[3] == 6 && (uint64_t)(e[20] | e[21] << 8) == c) return true;
    }
    return false;
}

/* fqn: the stored key (safetensors entry); name: the tensor it is added to.
 * The chunk's dtype, shape and byte length are what .metadata says (DCP's
 * loaders create the tensor from .metadata and copy the chunk into it,
 * converting its dtype): a disagreement is an error, never the chunk's word. */
static dck_status load_chunk(dcp_ctx *c, const char *fqn, const char *name, const sd_entry *e, int dtype, int gnd,
                             const uint64_t *gshape, const uint64_t *coff, const uint64_t *csz) {
    dcp_file *f;
    dck_status s = get_file(c, e->path, &f);
    if (s) return s;
    if (e->offset > f->len || e->length > f->len - e->offset)
        return dck_set_error(DCK_ERR_TRUNCATED, "%s/%s: truncated: chunk of %s needs bytes up to %llu", c->dir,
                             e->path, fqn, (unsigned long long)(e->offset + e->length));
    const uint8_t *d = f->data + e->offset;
    uint64_t nbytes;
    if (dck_shape_bytes((dck_dtype)dtype, csz, gnd, &nbytes))
        return dck_set_error(DCK_ERR_LIMIT, "%s: chunk of %s: size overflows", c->dir, fqn);
    const char *label = c->ck->files[f->file]->path;
    if (dck_is_zip(d, e->length)) {
        if (!zip_ends_at(d, e->length))
            return dck_set_error(DCK_ERR_FORMAT, "%s: chunk of %s at byte %llu: its zip does not end at the %llu bytes that .metadata gives it",
                                 label, fqn, (unsigned long long)e->offset, (unsigned long long)e->length);
        dck_pt_opts o = {"", name, gshape, coff, gnd, false, false};
        size_t before = c->ck->ntensors;
        long idx = dck_checkpoint_find(c->ck, name);
        size_t np = idx >= 0 ? c->ck->tensors[idx].npieces : 0;
        s = dck_pt_load_zip(c->ck, f->file, d, e->length, e->offset, label, &o, &c->mem);
        if (s) return s;
        idx = dck_checkpoint_find(c->ck, name);
        if (idx < 0 || c->ck->tensors[idx].npieces != np + 1 || c->ck->ntensors > before + 1)
            return dck_set_error(DCK_ERR_FORMAT, "%s: chunk of %s at byte %llu does not hold one tensor", label,
                                 fqn, (unsigned long long)e->offset);
        const dck_tensor_entry *t = &c->ck->tensors[idx];
        if ((int)t->info.dtype != dtype)
            return dck_set_error(DCK_ERR_LAYOUT, "%s: chunk of %s at byte %llu is stored as %s, .metadata says %s", label,
                                 fqn, (unsigned long long)e->offset, dck_dtype_name(t->info.dtype),
                                 dck_dtype_name((dck_dtype)dtype));
        const dck_piece *pc = &t->pieces[np];
        for (int i = 0; i < gnd; i++)
            if (pc->shape[i] != csz[i])
                return dck_set_error(DCK_ERR_LAYOUT, "%s: chunk of %s at byte %llu: tensor size differs from metadata",
                                     label, fqn, (unsigned long long)e->offset);
        return DCK_OK;
    }
    /* serialization_format=SAFETENSORS: the offset is that of a safetensors
     * blob (this rank's tensors); the chunk is its entry named fqn. */
    uint64_t avail = f->len - e->offset, hl = 0;
    for (int i = 7; i >= 0 && avail >= 8; i--) hl = (hl << 8) | d[i];
    if (avail < 10 || hl < 2 || hl > DCK_MAX_HEADER_BYTES || hl > avail - 8 || d[8] != '{')
        return dck_set_error(DCK_ERR_FORMAT, "%s: chunk of %s at byte %llu is neither a torch.save zip nor a safetensors blob",
                             label, fqn, (unsigned long long)e->offset);
    json_error_t jerr;
    json_t *h = json_loadb((const char *)d + 8, (size_t)hl, 0, &jerr);
    json_t *ent = h ? json_object_get(h, fqn) : NULL;
    json_t *dt = json_object_get(ent, "dtype"), *shp = json_object_get(ent, "shape"), *dof = json_object_get(ent, "data_offsets");
    dck_dtype sdt;
    s = DCK_OK;
    if (!ent || !json_is_string(dt) || dck_dtype_from_name(json_string_value(dt), &sdt) || !json_is_array(shp) ||
        (int)json_array_size(shp) != gnd || !json_is_array(dof) || json_array_size(dof) != 2)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: safetensors blob at byte %llu has no entry %s of its rank", label,
                          (unsigned long long)e->offset, fqn);
    else if ((int)sdt != dtype)
        s = dck_set_error(DCK_ERR_LAYOUT, "%s: chunk of %s at byte %llu is stored as %s, .metadata says %s", label, fqn,
                          (unsigned long long)e->offset, dck_dtype_name(sdt), dck_dtype_name((dck_dtype)dtype));
    for (int i = 0; !s && i < gnd; i++) {
        json_t *x = json_array_get(shp, (size_t)i);
        if (!json_is_integer(x) || (uint64_t)json_integer_value(x) != csz[i])
            s = dck_set_error(DCK_ERR_LAYOUT, "%s: safetensors entry %s: shape differs from the chunk's", label, fqn);
    }
    /* the writer's length of a raw chunk is its element bytes */
    if (!s && e->length != nbytes)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: chunk of %s at byte %llu: .metadata gives it %llu bytes, its %s elements need %llu",
                          label, fqn, (unsigned long long)e->offset, (unsigned long long)e->length,
                          dck_dtype_name((dck_dtype)dtype), (unsigned long long)nbytes);
    json_int_t a = 0, b = 0;
    if (!s) {
        a = json_integer_value(json_array_get(dof, 0));
        b = json_integer_value(json_array_get(dof, 1));
        if (a < 0 || b < a || (uint64_t)(b - a) != nbytes || (uint64_t)b > avail - 8 - hl)
            s = dck_set_error(DCK_ERR_FORMAT, "%s: safetensors entry %s: bad data_offsets", label, fqn);
    }
    json_decref(h);
    if (s) return s;
    dck_piece pc;
    s = dck_rd_piece(label, name, (dck_dtype)dtype, gnd, csz, NULL, 0, e->offset + 8 + hl + (uint64_t)a, nbytes,
                     f->file, false, &pc);
    if (s) return s;
    for (int i = 0; i < gnd; i++) pc.offset[i] = coff[i];
    return dck_ck_add_piece(c->ck, name, (dck_dtype)dtype, gshape, gnd, &pc);
}

/* The storage of an item (nd -1) or of a tensor's chunk at off, marked used. */
static sd_entry *find_sd(sd_entry *v, size_t n, const char *fqn, int nd, const uint64_t *off) {
    sd_entry key;
    memset(&key, 0, sizeof key);
    key.fqn = fqn;
    key.nd = nd;
    if (nd > 0) memcpy(key.off, off, sizeof(uint64_t) * (size_t)nd);
    sd_entry *e = bsearch(&key, v, n, sizeof *v, cmp_sd);
    if (e) e->used = true;
    return e;
}

/* "(3, 0)": a chunk's offset for messages; "" for an item. */
static const char *fmt_offset(const sd_entry *e, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < e->nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu%s", i ? ", " : " at offset (", (unsigned long long)e->off[i],
                              i + 1 == e->nd ? ")" : "");
    return buf;
}

/* storage_data and state_dict_metadata describe the same chunks: a key
 * listed twice (Python's dict keeps the last, a search may find either) or
 * stored bytes that no item names are a disagreement, not slack. */
static dck_status check_storage_index(const sd_entry *sd, size_t nsd, const char *label, bool after_items) {
    char ob[DCK_MAX_DIMS * 24 + 16];
    for (size_t i = 0; i < nsd; i++) {
        if (!after_items && i && !cmp_sd(&sd[i - 1], &sd[i]))
            return dck_set_error(DCK_ERR_FORMAT, "%s: storage_data lists %s%s twice (in %s at byte %llu and in %s at byte %llu)",
                                 label, sd[i].fqn, fmt_offset(&sd[i], ob, sizeof ob), sd[i - 1].path,
                                 (unsigned long long)sd[i - 1].offset, sd[i].path, (unsigned long long)sd[i].offset);
        if (after_items && !sd[i].used)
            return dck_set_error(DCK_ERR_FORMAT, "%s: storage_data holds %s%s (in %s at byte %llu), which state_dict_metadata does not list",
                                 label, sd[i].fqn, fmt_offset(&sd[i], ob, sizeof ob), sd[i].path,
                                 (unsigned long long)sd[i].offset);
    }
    return DCK_OK;
}

/* Megatron-Core ShardedObjects are bytes items keyed KEY/shard_O_G: the
 * object's offset O and the global shape G of the grid of such objects, each
 * a dot-joined list of integers (rng_state/shard_0.1_1.2: pipeline rank 0,
 * tensor rank 1 of a 1x2 grid). Each is torch.save'd as a one-element list.
 * What the grid means depends on the key, hence a table (see
 * detcheck-formats(7), "Megatron-Core ShardedObjects"):
 *   root       the common state (megatron-core 0.17 on; common.pt before):
 *              its items named as common.pt's are, so that a golden of one
 *              version verifies the other;
 *   per_rank   state of one rank of a layout (RNG): keeps KEY/shard_O_G, so
 *              that it is compared where the layouts match and set aside as
 *              layout state where they do not (dck_layout_state_of_name);
 * any other key: a grid of one object is named KEY, a larger grid (stacked
 * layers' _extra_state) keeps KEY/shard_O_G. The list wrapper is dropped. */
typedef enum { SO_KEYED, SO_ROOT, SO_PER_RANK } so_kind;
static const struct {
    const char *key_glob;
    so_kind kind;
} sharded_objects[] = {
    {"common_state", SO_ROOT},
    {"rng_state", SO_PER_RANK},
    {"*.rng_state", SO_PER_RANK},
};

/* "I.I.I" (1 to DCK_MAX_DIMS integers) at s, up to the stop byte: the
 * count, the product in *prod (saturating); 0 when malformed. */
static int int_list(const char *s, const char *end, uint64_t *prod, uint64_t *vals) {
    int k = 0;
    *prod = 1;
    while (s < end) {
        uint64_t v = 0;
        const char *d = s;
        while (s < end && *s >= '0' && *s <= '9' && s - d < 12) v = v * 10 + (uint64_t)(*s++ - '0');
        if (s == d || k == DCK_MAX_DIMS) return 0;
        vals[k++] = v;
        *prod = *prod > UINT32_MAX || v > UINT32_MAX ? UINT64_MAX : *prod * v;
        if (s < end && *s++ != '.') return 0;
        if (s == end && s[-1] == '.') return 0;
    }
    return k;
}

/* The name prefix of a bytes item (see above): fqn itself, or a prefix
 * written into buf; *sharded_object when fqn is a ShardedObject's key. */
static const char *bytes_item_prefix(const char *fqn, char *buf, size_t n, bool *sharded_object) {
    *sharded_object = false;
    const char *sh = NULL;
    for (const char *p = strstr(fqn, "/shard_"); p; p = strstr(p + 1, "/shard_")) sh = p;
    if (!sh || sh == fqn) return fqn;
    const char *o = sh + 7, *end = o + strlen(o), *us = memchr(o, '_', (size_t)(end - o));
    uint64_t po, pg, ov[DCK_MAX_DIMS], gv[DCK_MAX_DIMS];
    int no = us ? int_list(o, us, &po, ov) : 0, ng = us ? int_list(us + 1, end, &pg, gv) : 0;
    if (!no || no != ng) return fqn;
    for (int i = 0; i < no; i++)
        if (ov[i] >= gv[i]) return fqn;
    *sharded_object = true;
    size_t kl = (size_t)(sh - fqn);
    if (kl >= n) return fqn;
    memcpy(buf, fqn, kl);
    buf[kl] = 0;
    so_kind kind = SO_KEYED;
    for (size_t i = 0; i < sizeof sharded_objects / sizeof sharded_objects[0]; i++)
        if (fnmatch(sharded_objects[i].key_glob, buf, 0) == 0) {
            kind = sharded_objects[i].kind;
            break;
        }
    if (kind == SO_PER_RANK || pg != 1) return fqn;
    if (kind == SO_ROOT) buf[0] = 0;
    return buf;
}

/* Megatron-Core's dist_checkpointing writes metadata.json beside .metadata:
 * {"sharded_backend": "torch_dist", ...}. From megatron-core 0.16 on it is
 * the only mark of Megatron (.metadata is torch's plain Metadata). */
static bool megatron_dir(const char *dir) {
    char *p = dck_path_join(dir, "metadata.json");
    json_error_t jerr;
    json_t *j = p ? json_load_file(p, 0, &jerr) : NULL;
    const char *b = json_string_value(json_object_get(j, "sharded_backend"));
    bool yes = b && !strncmp(b, "torch_dist", 10);
    json_decref(j);
    free(p);
    return yes;
}

/* Loads a DCP directory (its .metadata) into ck. relroot: dir's path
 * relative to the hashed root. */

dck_status dck_dcp_load_dir(dck_checkpoint *ck, const char *dir, const char *relroot) {
    dcp_ctx c = {0};
    c.ck = ck;
    c.dir = dir;
    c.relroot = relroot;
    sd_entry *sd = NULL;
    size_t nsd = 0;
    pk_ctx *pc = NULL;
    dck_mcore *mc = NULL;
    char *nbuf = NULL;
    dcp_file *mf;
    size_t before = ck->ntensors;
    dck_status s = get_file(&c, ".metadata", &mf);
    if (s) goto done;
    c.mem = (dck_memfile){ck, ck->files[mf->file]->path, 0, false, 0};
    c.label = ck->files[mf->file]->path;
    uint32_t meta_file = mf->file; /* mf moves when c.files grows */
    if ((s = dck_pk_ctx_create(c.label, NULL, &dck_pk_torch_handlers, &pc))) goto done;
    pk_node *root;
    size_t used;
    if ((s = dck_pk_load(pc, mf->data, (size_t)mf->len, -1, &root, &used))) goto done;
    pk_node *sdm = dck_pk_get(root, "state_dict_metadata");
    pk_node *sdat = dck_pk_get(root, "storage_data");
    if (!sdm || sdm->kind != PK_DICT || !sdat || sdat->kind != PK_DICT) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: not a torch.distributed.checkpoint Metadata", c.label);
        goto done;
    }
    /* Megatron-Core (torch_dist): flattened ranges and master-weight names */
    if ((s = dck_mcore_create(root, sdm, c.label, megatron_dir(dir), &mc))) goto done;
    sd = calloc(sdat->u.dict.n + 1, sizeof *sd);
    nbuf = malloc(DCK_MAX_NAME + 64);
    if (!sd || !nbuf) {
        s = dck_oom(NULL);
        goto done;
    }
    for (size_t i = 0; i < sdat->u.dict.n; i++) {
        const pk_node *k = sdat->u.dict.keys[i], *v = sdat->u.dict.vals[i];
        const pk_node *fqn = dck_pk_get(k, "fqn"), *off = dck_pk_get(k, "offset");
        const pk_node *rp = dck_pk_get(v, "relative_path"), *o = dck_pk_get(v, "offset"), *l = dck_pk_get(v, "length");
        const pk_node *td = dck_pk_get(v, "transform_descriptors");
        int64_t oo, ll;
        sd_entry *e = &sd[nsd];
        if (!fqn || fqn->kind != PK_STR || !rp || rp->kind != PK_STR || !dck_pk_int(o, &oo) || !dck_pk_int(l, &ll) ||
            oo < 0 || ll < 0) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: bad storage_data entry %zu", c.label, i);
            goto done;
        }
        size_t ntd;
        if (td && td->kind != PK_NONE && (dck_pk_items(td, &ntd), ntd > 0)) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: %s is stored with transforms (extensions), which detcheck does not read",
                              c.label, fqn->u.s.p);
            goto done;
        }
        e->fqn = fqn->u.s.p;
        e->nd = -1;
        if (off && off->kind != PK_NONE && !tuple_u64(off, &e->nd, e->off)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: bad chunk offset of %s", c.label, e->fqn);
            goto done;
        }
        e->path = rp->u.s.p;
        e->offset = (uint64_t)oo;
        e->length = (uint64_t)ll;
        nsd++;
    }
    qsort(sd, nsd, sizeof *sd, cmp_sd);
    if ((s = check_storage_index(sd, nsd, c.label, false))) goto done;
    for (size_t i = 0; i < sdm->u.dict.n && !s; i++) {
        const pk_node *k = sdm->u.dict.keys[i], *md = sdm->u.dict.vals[i];
        if (k->kind != PK_STR) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: state_dict_metadata key is not a string", c.label);
            break;
        }
        const char *fqn = k->u.s.p;
        if (dck_pk_object_is(md, "torch.distributed.checkpoint.metadata", "BytesStorageMetadata")) {
            sd_entry *e = find_sd(sd, nsd, fqn, -1, NULL);
            if (!e) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: no storage for item %s", c.label, fqn);
                break;
            }
            dcp_file *f;
            if ((s = get_file(&c, e->path, &f))) break;
            if (e->offset > f->len || e->length > f->len - e->offset) {
                s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: item %s", ck->files[f->file]->path, fqn);
                break;
            }
            const uint8_t *b = f->data + e->offset;
            if (dck_is_zip(b, e->length) && !zip_ends_at(b, e->length)) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: item %s at byte %llu: its zip does not end at the %llu bytes that .metadata gives it",
                                  ck->files[f->file]->path, fqn, (unsigned long long)e->offset, (unsigned long long)e->length);
                break;
            }
            if (!dck_is_zip(b, e->length)) { /* raw bytes (a BytesIO the user saved): by digest */
                char t[48];
                memcpy(t, "bytes:", 6);
                dck_digest_to_hex(dck_xxh128(b, (size_t)e->length), t + 6);
                s = dck_ck_add_value(ck, fqn, t);
                continue;
            }
            bool so;
            const char *prefix = bytes_item_prefix(fqn, nbuf, DCK_MAX_NAME + 64, &so);
            dck_pt_opts o = {prefix, NULL, NULL, NULL, 0, true, so};
            s = dck_pt_load_zip(ck, f->file, b, e->length, e->offset, ck->files[f->file]->path, &o, &c.mem);
            continue;
        }
        if (!dck_pk_object_is(md, "torch.distributed.checkpoint.metadata", "TensorStorageMetadata")) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: item %s has an unknown kind of metadata", c.label, fqn);
            break;
        }
        int dtype = dtype_of_props(dck_pk_get(md, "properties"));
        if (dtype < 0) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which detcheck does not read", c.label,
                              fqn, dtype_name_of_props(dck_pk_get(md, "properties")));
            break;
        }
        int gnd;
        uint64_t gshape[DCK_MAX_DIMS];
        if (!tuple_u64(dck_pk_get(md, "size"), &gnd, gshape)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: bad size of %s", c.label, fqn);
            break;
        }
        const char *name = dck_mcore_name(mc, fqn, nbuf, DCK_MAX_NAME + 64);
        int ond = 0;
        const uint64_t *oshape = NULL;
        bool flat = dck_mcore_flat_shape(mc, fqn, &ond, &oshape);
        if (flat && dck_checkpoint_find(ck, name) >= 0) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: flattened-range tensor %s is stored twice", c.label, name);
            break;
        }
        size_t nch;
        pk_node **ch = dck_pk_items(dck_pk_get(md, "chunks"), &nch);
        if (nch == 0) { /* DCP's loaders create it from .metadata and fill nothing */
            uint64_t nb;
            if (dck_shape_bytes((dck_dtype)dtype, gshape, gnd, &nb) || nb != 0) {
                s = dck_set_error(DCK_ERR_LAYOUT, "%s: tensor %s has no chunks: none of its elements is stored",
                                  c.label, fqn);
                break;
            }
            /* with no elements it is still a tensor of the checkpoint (one
             * side that lacks it differs): an empty piece in .metadata */
            dck_piece q = {.file = meta_file};
            memcpy(q.shape, gshape, sizeof *gshape * (size_t)gnd);
            s = dck_ck_add_piece(ck, name, (dck_dtype)dtype, gshape, gnd, &q);
        }
        for (size_t j = 0; j < nch && !s; j++) {
            int nd1, nd2;
            uint64_t co[DCK_MAX_DIMS], cs[DCK_MAX_DIMS];
            if (!tuple_u64(dck_pk_get(ch[j], "offsets"), &nd1, co) || !tuple_u64(dck_pk_get(ch[j], "sizes"), &nd2, cs) ||
                nd1 != gnd || nd2 != gnd) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: bad chunk %zu of %s", c.label, j, fqn);
                break;
            }
            const sd_entry *e = find_sd(sd, nsd, fqn, gnd, co);
            if (!e) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: no storage for a chunk of %s", c.label, fqn);
                break;
            }
            s = load_chunk(&c, fqn, name, e, dtype, gnd, gshape, co, cs);
        }
        if (!s && flat) s = dck_mcore_unflatten(ck, c.label, name, ond, oshape);
    }
    if (!s) s = check_storage_index(sd, nsd, c.label, true);
    if (!s) s = dck_mcore_buckets(ck, sdm, c.label); /* dp_reshardable buckets -> per parameter */
    /* items in state_dict_metadata's order: the save plans', the state
     * dict's (the model's) */
    if (!s) dck_ck_mark_ordered(ck, before);
done:
    dck_mcore_free(mc);
    free(nbuf);
    dck_pk_ctx_free(pc);
    free(sd);
    for (size_t i = 0; i < c.nfiles; i++) free(c.files[i].rel);
    free(c.files);
    return s;
}

static int dcp_probe(const char *path, bool is_dir, const uint8_t *head, size_t n) {
    (void)head;
    (void)n;
    return is_dir && (dck_path_exists_in(path, ".metadata", false) || dck_path_exists_in(path, ".metadata.zst", false));
}

static dck_status dcp_open(dck_checkpoint *ck, const char *path, const char *relroot) {
    return dck_dcp_load_dir(ck, path, relroot);
}

const dck_reader dck_reader_dcp = {"dcp", dcp_probe, dcp_open, NULL, 1};
