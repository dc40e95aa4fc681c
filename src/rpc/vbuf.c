/* The vbuf: the bump arena RPC values live in, and the store objects
 * their payloads map (held, made, borrowed), let go at reset or handed to
 * another vbuf. Sharing puts a tensor into a store object once, so that it
 * is passed by reference from then on (sh_value_share). */
#include "rpc/value.h"
#include "store/client.h"

#include <stdio.h>
#include <string.h>

int shoal_vbuf_create(shoal_vbuf **out)
{
	shoal_vbuf *b = SH_NEW(shoal_vbuf);
	if (!b)
		return SHOAL_ENOMEM;
	*out = b;
	return 0;
}

/* Lets go of the store objects of b's values. */
static void drop_shared(shoal_vbuf *b)
{
	for (uint32_t i = 0; i < b->nborrowed; i++)
		sh_client_unborrow(b->store, b->borrowed[i]);
	for (uint32_t i = 0; i < b->nheld; i++)
		shoal_object_release(b->held[i]);
	for (uint32_t i = 0; i < b->nmade; i++)
		shoal_delete_id(b->store, b->made[i]);
	b->nheld = b->nmade = b->nborrowed = 0;
}

void sh_vbuf_let_go(shoal_vbuf *b)
{
	for (uint32_t i = 0; i < b->nborrowed_prev; i++)
		sh_client_unborrow(b->store, b->borrowed_prev[i]);
	for (uint32_t i = 0; i < b->nheld_prev; i++)
		shoal_object_release(b->held_prev[i]);
	b->nheld_prev = b->nborrowed_prev = 0;
}

#define SWAP(T, x, y)       \
	do {                \
		T t_ = (x); \
		(x) = (y);  \
		(y) = t_;   \
	} while (0)

void sh_vbuf_reset_keep(shoal_vbuf *b)
{
	sh_vbuf_let_go(b);
	SWAP(shoal_object **, b->held, b->held_prev);
	SWAP(uint32_t, b->nheld, b->nheld_prev);
	SWAP(uint32_t, b->cap_held, b->cap_held_prev);
	SWAP(uint64_t *, b->borrowed, b->borrowed_prev);
	SWAP(uint32_t, b->nborrowed, b->nborrowed_prev);
	SWAP(uint32_t, b->cap_borrowed, b->cap_borrowed_prev);
	drop_shared(b); /* what it made goes now; nothing else is left in it */
	sh_bump_reset(&b->a);
	b->err = 0;
}

void shoal_vbuf_free(shoal_vbuf *b)
{
	if (!b)
		return;
	sh_vbuf_let_go(b);
	if (b->held_prev)
		shoal_free(b->held_prev, b->cap_held_prev * sizeof(*b->held_prev));
	if (b->borrowed_prev)
		shoal_free(b->borrowed_prev, b->cap_borrowed_prev * sizeof(*b->borrowed_prev));
	drop_shared(b);
	if (b->held)
		shoal_free(b->held, b->cap_held * sizeof(*b->held));
	if (b->made)
		shoal_free(b->made, b->cap_made * sizeof(*b->made));
	if (b->borrowed)
		shoal_free(b->borrowed, b->cap_borrowed * sizeof(*b->borrowed));
	sh_bump_fini(&b->a);
	SH_DELETE(b);
}

void shoal_vbuf_reset(shoal_vbuf *b)
{
	sh_vbuf_let_go(b);
	drop_shared(b);
	sh_bump_reset(&b->a);
	b->err = 0;
}

/* Appends the elem bytes at v to the array *arr. */
int sh_vbuf_push(void **arr, uint32_t *n, uint32_t *cap, size_t elem, const void *v)
{
	int rc = sh_grow_array(arr, cap, *n, elem);
	if (rc)
		return rc;
	memcpy((char *)*arr + *n * elem, v, elem);
	(*n)++;
	return 0;
}

int sh_vbuf_adopt(shoal_vbuf *dst, shoal_vbuf *src)
{
	if (src->store && dst->store && src->store != dst->store)
		return SHOAL_EINVAL;
	uint32_t need_h = dst->nheld + src->nheld, need_m = dst->nmade + src->nmade,
		 need_b = dst->nborrowed + src->nborrowed;
	/* Room first, so that nothing moves unless everything can. */
	if (sh_grow_to((void **)&dst->held, &dst->cap_held, need_h, sizeof(*dst->held)) ||
	    sh_grow_to((void **)&dst->made, &dst->cap_made, need_m, sizeof(*dst->made)) ||
	    sh_grow_to((void **)&dst->borrowed, &dst->cap_borrowed, need_b, sizeof(*dst->borrowed)))
		return SHOAL_ENOMEM;
	if (src->nheld)
		memcpy(dst->held + dst->nheld, src->held, src->nheld * sizeof(*src->held));
	if (src->nmade)
		memcpy(dst->made + dst->nmade, src->made, src->nmade * sizeof(*src->made));
	if (src->nborrowed)
		memcpy(dst->borrowed + dst->nborrowed, src->borrowed,
		       src->nborrowed * sizeof(*src->borrowed));
	dst->nheld = need_h, dst->nmade = need_m, dst->nborrowed = need_b;
	src->nheld = src->nmade = src->nborrowed = 0;
	if (src->store)
		dst->store = src->store;
	sh_bump_adopt(&dst->a, &src->a);
	return 0;
}

/* Maps object id and holds it in b: the tensor's bytes. */
int sh_vbuf_map_tensor(shoal_vbuf *b, shoal_id id, const void **data, size_t *bytes, char *why,
		       size_t whylen)
{
	if (!b->store) {
		snprintf(why, whylen, "a shared tensor, but no store on this side");
		return SHOAL_EPROTO;
	}
	shoal_object *o;
	int rc = shoal_get(b->store, id, &o);
	if (rc) {
		snprintf(why, whylen, "shared tensor %016llx: %s", (unsigned long long)id,
			 shoal_client_error(b->store));
		return rc;
	}
	shoal_tensor t;
	if ((rc = shoal_node_tensor(shoal_object_root(o), &t)) != 0 ||
	    (rc = sh_vbuf_push((void **)&b->held, &b->nheld, &b->cap_held, sizeof(o), &o)) != 0) {
		snprintf(why, whylen, "shared object %016llx is not a tensor",
			 (unsigned long long)id);
		shoal_object_release(o);
		return rc;
	}
	*data = t.data;
	*bytes = t.nbytes;
	return 0;
}

int sh_value_share(shoal_vbuf *b, shoal_value *v, char *why, size_t whylen)
{
	return sh_value_share_min(b, v, 0, why, whylen);
}

int sh_value_share_min(shoal_vbuf *b, shoal_value *v, size_t min, char *why, size_t whylen)
{
	if (v->type == SHOAL_V_ARRAY || v->type == SHOAL_V_MAP) {
		size_t k = v->type == SHOAL_V_MAP ? 2 * (size_t)v->n : v->n;
		for (size_t i = 0; i < k; i++) {
			int rc = sh_value_share_min(b, &v->v.items[i], min, why, whylen);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (!sh_value_by_ref(v) || v->v.t.obj || v->v.t.nbytes < min)
		return 0;
	if (!b->store) {
		snprintf(why, whylen, "shared mode needs a store (config store_socket)");
		return SHOAL_EINVAL;
	}
	/* The first share: one copy into a store object; from then on the
	 * value is that object, passed by reference. */
	shoal_builder *bl;
	void *dst;
	shoal_id id;
	int rc = shoal_builder_create(b->store, "tensor", &bl);
	if (rc == 0 && (rc = shoal_node_set_tensor(shoal_builder_root(bl), v->v.t.dtype,
						   v->v.t.ndim, v->v.t.shape, &dst)) != 0)
		shoal_builder_abort(bl);
	if (rc == 0 && (rc = shoal_builder_write(bl, dst, v->v.t.data, v->v.t.nbytes)) != 0)
		shoal_builder_abort(bl);
	if (rc == 0) {
		rc = b->owner ? shoal_builder_seal_for(bl, b->owner, &id)
			      : shoal_builder_seal(bl, NULL, 0, &id);
	}
	if (rc) {
		snprintf(why, whylen, "sharing a %zu-byte tensor: %s", v->v.t.nbytes,
			 shoal_client_error(b->store));
		return rc;
	}
	if ((rc = sh_vbuf_push((void **)&b->made, &b->nmade, &b->cap_made, sizeof(id), &id)) != 0) {
		shoal_delete_id(b->store, id);
		return rc;
	}
	size_t bytes;
	if ((rc = sh_vbuf_map_tensor(b, id, &v->v.t.data, &bytes, why, whylen)) != 0)
		return rc;
	v->v.t.obj = id;
	return 0;
}
