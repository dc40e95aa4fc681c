/* Object metadata trees: the in-memory form (struct shoal_node) that
 * builders fill, the store validates and readers walk, and its msgpack
 * encoding, the one way a tree crosses a process boundary:
 *
 *   node  = [type: str, fields: {key: value}, blobs: [blob], members: [[name, node]]]
 *   value = nil | bool | int | float | str | [int, ...]
 *   blob  = bin (inline bytes, only in a seal request)
 *         | [segment: uint, offset: uint, size: uint]   (segment 0: the arena)
 *
 * One decoder (sh_node_decode) reads every tree, from a client's seal
 * request in the store and from the store's replies in a client: it checks
 * the grammar, the bounds below, unique keys and member names, and the
 * built-in types (sh_node_check_types). */
#ifndef SHOAL_STORE_NODE_H
#define SHOAL_STORE_NODE_H

#include "shoal_impl.h"
#include "wire/wire.h"

#include <shoal/store.h>

#define SH_NODE_MAX_DEPTH 16
#define SH_NODE_MAX_NAME 4096	/* member names: long dotted paths fit */
#define SH_NODE_MAX_KEY 255	/* type names and field keys */
#define SH_NODE_MAX_INTS 1024	/* elements of an int-array field */
#define SH_NODE_MAX_FIELDS 1024 /* per node */

enum { SH_F_NIL = 1, SH_F_BOOL, SH_F_INT, SH_F_FLOAT, SH_F_STR, SH_F_INTS };

typedef struct sh_field {
	const char *key;
	int kind;
	uint32_t n; /* SH_F_STR: bytes; SH_F_INTS: elements */
	union {
		bool b;
		int64_t i;
		double f;
		const char *s;
		int64_t *ints;
	} v;
} sh_field;

typedef struct sh_blobref {
	uint64_t seg, off, size;
	const void *inline_data; /* seal requests: the bytes themselves */
	void *ptr;		 /* builders: writable; readers: mapped read-only */
} sh_blobref;

struct shoal_node {
	const char *type;
	uint32_t nfields, nblobs, nmembers;
	sh_field *fields;
	sh_blobref *blobs;
	const char **names;
	struct shoal_node **members;
	uint32_t *order; /* decoded trees: member indices sorted by name */
	/* builders only: capacities, and who owns this tree */
	uint32_t cap_fields, cap_blobs, cap_members;
	struct shoal_builder *builder;
};

/* Decodes one node at m into a tree allocated from a. */
int sh_node_decode(sh_mp *m, sh_bump *a, shoal_node **out, char *why, size_t whylen);
/* The built-in types: a "tensor" has a known dtype, a shape, one blob of
 * exactly the shape's bytes; a "tensor_dict" has only tensor members. */
int sh_node_check_types(const shoal_node *n, char *why, size_t whylen);
/* Encodes a tree; blobs with inline_data as bin, the others as refs. */
void sh_node_pack(msgpack_packer *pk, const shoal_node *n);
/* Field / member lookup shared by builders and readers. */
const sh_field *sh_node_field(const shoal_node *n, const char *key);
/* Bytes of all blobs of the tree. */
uint64_t sh_node_bytes(const shoal_node *n);
/* SHA-256 of the tree's canonical form: types, fields, member names and
 * blob sizes, in order, never where the blobs are: the same for an object
 * and its copy in another store. libcrypto must be loaded (ossl.h). */
int sh_node_digest(const shoal_node *n, unsigned char out[32]);

#endif
