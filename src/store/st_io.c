/* safetensors files in and out of the store. Import validates the header
 * (safetensors.c), lays the tensors out in one region exactly as they lie
 * in the file, and has the kernel copy the data area into the region's
 * memfd in one pass (copy_file_range, else sendfile, else read): no page
 * of it is faulted in by us. Export regenerates the header the reference
 * writer would write from the tensor_dict and writes the blobs after it. */
#include "store/client.h"
#include "store/safetensors.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISSOCK(m) ? "a socket"
			     : "not a regular file";
}

/* errno, as the failure of c, naming path. */
static int fail_errno(shoal_client *c, const char *path)
{
	int rc = shoal_errno();
	return sh_err_set(c, rc, "%s: %s", path, strerror(-rc));
}

/* Opens path for reading if it is a regular file, else fails with
 * SHOAL_EBADMSG and says what it is. A plain open would block on a FIFO
 * with no writer and may act on a device (a tape rewinds), so stat()
 * refuses those without opening them, and O_NONBLOCK plus fstat() of what
 * was really opened closes the race of a path swapped in between. */
static int open_regular(shoal_client *c, const char *path)
{
	struct stat st;
	int fd = -1;
	if (stat(path, &st) != 0)
		return fail_errno(c, path);
	if (S_ISREG(st.st_mode)) {
		if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)) < 0)
			return fail_errno(c, path);
		if (fstat(fd, &st) != 0) {
			int rc = fail_errno(c, path);
			close(fd);
			return rc;
		}
	}
	if (!S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return sh_err_set(c, SHOAL_EBADMSG,
				  "%s is %s: expected a regular .safetensors file", path,
				  file_kind(st.st_mode));
	}
	/* Reads of a regular file ignore O_NONBLOCK; cleared all the same so
	 * that no read ever sees EAGAIN. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		int rc = fail_errno(c, path);
		close(fd);
		return rc;
	}
	return fd;
}

int shoal_import_safetensors(shoal_client *c, const char *path, const char *name, unsigned flags,
			     shoal_id *id)
{
	if (!c || !path)
		return SHOAL_EINVAL;
	int fd = open_regular(c, path);
	if (fd < 0)
		return fd;
	struct stat st;
	unsigned char pre[8];
	char err[256] = "";
	uint64_t hlen = 0;
	char *json = NULL;
	sh_st_file *f = NULL;
	shoal_builder *b = NULL;
	int rc = 0;
	if (fstat(fd, &st) != 0) {
		rc = shoal_errno();
		snprintf(err, sizeof(err), "%s", strerror(-rc));
	} else if (st.st_size < 8 || pread(fd, pre, 8, 0) != 8) {
		rc = SHOAL_EBADMSG;
		snprintf(err, sizeof(err), "%lld bytes: expected at least the 8-byte header length",
			 (long long)st.st_size);
	} else {
		rc = sh_st_prefix(pre, (uint64_t)st.st_size, &hlen, err, sizeof(err));
	}
	if (rc == 0 && !(json = shoal_alloc(hlen ? hlen : 1)))
		rc = SHOAL_ENOMEM;
	if (rc == 0 && pread(fd, json, hlen, 8) != (ssize_t)hlen) {
		rc = SHOAL_EIO;
		snprintf(err, sizeof(err), "could not read the %" PRIu64 "-byte header", hlen);
	}
	if (rc == 0)
		rc = sh_st_parse(json, hlen, (uint64_t)st.st_size - 8 - hlen, &f, err, sizeof(err));
	if (rc == 0)
		rc = shoal_builder_create(c, "tensor_dict", &b);
	shoal_node *root = b ? shoal_builder_root(b) : NULL;
	for (size_t i = 0; rc == 0 && i < f->nmeta; i++) {
		size_t kl = strlen(f->meta[i].key);
		if (kl > SH_NODE_MAX_KEY) {
			rc = SHOAL_EINVAL;
			snprintf(err, sizeof(err),
				 "__metadata__ key of %zu bytes: the store keeps keys up to %d", kl,
				 SH_NODE_MAX_KEY);
			break;
		}
		rc = shoal_node_set_str(root, f->meta[i].key, f->meta[i].val,
					strlen(f->meta[i].val));
	}
	uint32_t reg = 0;
	int rfd = -1;
	void *addr;
	if (rc == 0 && f->data_len > 0)
		rc = sh_builder_region(b, f->data_len, &reg, &rfd, &addr);
	for (size_t i = 0; rc == 0 && i < f->n; i++) {
		const sh_st_tensor *t = &f->t[i];
		if (t->name_len > SH_NODE_MAX_NAME) {
			rc = SHOAL_EINVAL;
			snprintf(err, sizeof(err),
				 "tensor name of %zu bytes: the store keeps up to %d", t->name_len,
				 SH_NODE_MAX_NAME);
			break;
		}
		shoal_node *m;
		const char *dn = shoal_dtype_name(t->dtype);
		rc = shoal_node_add_member(root, t->name, "tensor", &m);
		if (rc == 0)
			rc = shoal_node_set_str(m, "dtype", dn, strlen(dn));
		if (rc == 0)
			rc = shoal_node_set_ints(m, "shape", t->shape, (size_t)t->ndim);
		if (rc == 0 && f->data_len > 0)
			rc = sh_builder_blob_at(m, reg, t->begin, t->end - t->begin);
		else if (rc == 0) {
			void *p; /* every tensor is empty */
			rc = shoal_node_add_blob(m, 0, &p);
		}
	}
	if (rc == 0 && f->data_len > 0) {
		/* as shoal_builder_write: a region whose pages exist (huge ones,
		 * which take no write(2); a spare) by its mapping, else by the
		 * kernel's copy, which faults nothing into this process */
		rc = sh_fd_pages_exist(rfd)
			     ? sh_fd_pread_all(fd, addr, (size_t)f->data_len, f->data_start)
			     : sh_fd_copy(rfd, 0, fd, f->data_start, f->data_len);
		if (rc)
			snprintf(err, sizeof(err), "copying the data: %s", shoal_strerror(rc));
	}
	if (b && rc == 0) {
		rc = shoal_builder_seal(b, name, flags, id);
		b = NULL;
		if (rc) /* the seal's own message is the client's error */
			err[0] = 0;
	}
	if (b)
		shoal_builder_abort(b);
	if (f)
		sh_st_free(f);
	if (json)
		shoal_free(json, hlen ? hlen : 1);
	close(fd);
	if (rc && err[0])
		sh_err_set(c, rc, "%s: %s", path, err);
	return rc;
}

static int write_all(int fd, const void *p, size_t n)
{
	const unsigned char *b = p;
	while (n) {
		ssize_t k = write(fd, b, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return shoal_errno();
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

int shoal_export_safetensors(shoal_client *c, const char *name, const char *path)
{
	if (!c || !name || !path)
		return SHOAL_EINVAL;
	shoal_object *o;
	int rc = shoal_get_by_name(c, name, &o);
	if (rc)
		return rc;
	const shoal_node *r = shoal_object_root(o);
	size_t n = r->nmembers, nmeta = 0;
	sh_st_tensor *t = NULL;
	sh_st_meta *meta = NULL;
	unsigned char *hdr = NULL;
	size_t hlen = 0;
	if (strcmp(r->type, "tensor_dict") != 0) {
		rc = sh_err_set(c, SHOAL_EINVAL, "%s is a %s, expected a tensor_dict", name,
				r->type);
		goto out;
	}
	t = n ? shoal_calloc(n, sizeof(*t)) : NULL;
	meta = r->nfields ? shoal_calloc(r->nfields, sizeof(*meta)) : NULL;
	if ((n && !t) || (r->nfields && !meta)) {
		rc = SHOAL_ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < r->nfields; i++)
		if (r->fields[i].kind == SH_F_STR) {
			meta[nmeta].key = (char *)r->fields[i].key;
			meta[nmeta++].val = (char *)r->fields[i].v.s;
		}
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		shoal_tensor tv;
		if ((rc = shoal_node_tensor(r->members[i], &tv)) != 0)
			goto out;
		t[i].name = (char *)r->names[i];
		t[i].name_len = strlen(r->names[i]);
		t[i].dtype = tv.dtype;
		t[i].ndim = tv.ndim;
		memcpy(t[i].shape, tv.shape, sizeof(t[i].shape));
		t[i].begin = off;
		off += tv.nbytes;
		t[i].end = off;
	}
	if ((rc = sh_st_header_write(t, n, meta, nmeta, &hdr, &hlen)) != 0) {
		sh_err_set(c, rc, "%s cannot be written as safetensors: %s", name,
			   shoal_strerror(rc));
		goto out;
	}
	/* Non-blocking, so that a FIFO nobody reads fails at once (ENXIO)
	 * rather than hanging the open; writes then block as usual, a reader
	 * being there. */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
	if (fd < 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		rc = shoal_errno();
		if (fd >= 0)
			close(fd);
		if (rc == -ENXIO)
			sh_err_set(c, rc, "%s is a FIFO that no one reads", path);
		else
			sh_err_set(c, rc, "%s: %s", path, strerror(-rc));
		goto out;
	}
	rc = write_all(fd, hdr, hlen);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const void *p;
		size_t len;
		shoal_node_blob(r->members[i], 0, &p, &len);
		rc = write_all(fd, p, len);
	}
	if (close(fd) != 0 && rc == 0)
		rc = shoal_errno();
	if (rc)
		sh_err_set(c, rc, "writing %s: %s", path, shoal_strerror(rc));
out:
	if (hdr)
		shoal_free(hdr, hlen);
	if (t)
		shoal_free(t, n * sizeof(*t));
	if (meta)
		shoal_free(meta, r->nfields * sizeof(*meta));
	shoal_object_release(o);
	return rc;
}
