/* The record of one object in a file (the format is in record.h): its
 * writing from a store's memfds, and its reading back into fresh ones, with
 * every byte checked. Shared by the state directory and the spill
 * directory, on whatever thread does their I/O. */
#include "store/record.h"
#include "store/node.h"
#include "store/proto.h"
#include "shm/shm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#define MAGIC "SHOALST1"
#define VERSION 1
#define PAGE 4096u
/* An object's metadata: what a get may return, plus its inline blobs. */
#define META_MAX ((uint64_t)SH_STORE_REPLY_MAX + SH_STORE_INLINE_TOTAL)
/* The piece a segment is written or read in: large enough that the disk
 * streams, small enough that it is still in the cache when it is hashed. */
#define PIECE ((size_t)8 << 20)
/* What a hash reads back at a time: it stays in the CPU's cache. */
#define HASH_BUF ((size_t)1 << 20)

static uint64_t page_up(uint64_t v)
{
	return (v + PAGE - 1) & ~(uint64_t)(PAGE - 1);
}

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8); /* the format is little-endian, as every host we build for */
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* The hash of a segment being copied, by a thread of its own for a large
 * one: it reads back what the copy has put in (through a buffer that stays
 * in the CPU's cache), which costs about half the copy, which then hides
 * it. A small one is hashed when its copy ends. */
typedef struct hasher {
	int sfd;
	uint64_t len;
	sh_hash *hx;
	bool thread;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t copied; /* bytes the copy has put in */
	bool failed;	 /* the copy stopped short */
	int rc;
} hasher;

/* Hashes [from, to) of the segment, read back through buf. */
static int hash_back(int sfd, uint64_t from, uint64_t to, sh_hash *hx, unsigned char *buf)
{
	for (uint64_t at = from; at < to; at += HASH_BUF) {
		size_t n = to - at < HASH_BUF ? (size_t)(to - at) : HASH_BUF;
		int rc = sh_fd_pread_all(sfd, buf, n, at);
		if (rc)
			return rc;
		sh_hash64_add(hx, buf, n);
	}
	return 0;
}

static void *hasher_main(void *arg)
{
	hasher *h = arg;
	unsigned char *buf = shoal_alloc(HASH_BUF);
	uint64_t done = 0;
	h->rc = buf ? 0 : SHOAL_ENOMEM;
	while (h->rc == 0 && done < h->len) {
		pthread_mutex_lock(&h->mu);
		while (h->copied == done && !h->failed)
			pthread_cond_wait(&h->cv, &h->mu);
		uint64_t to = h->copied;
		bool failed = h->failed;
		pthread_mutex_unlock(&h->mu);
		if (to == done && failed)
			break;
		h->rc = hash_back(h->sfd, done, to, h->hx, buf);
		done = to;
	}
	if (buf)
		shoal_free(buf, HASH_BUF);
	return NULL;
}

/* Starts hashing len bytes of sfd into *hx, ready of them there already
 * (all of a segment being written out, none of one being read in). */
static void hasher_start(hasher *h, int sfd, uint64_t len, sh_hash *hx, uint64_t ready)
{
	*h = (hasher){.sfd = sfd, .len = len, .hx = hx, .copied = ready};
	if (len < 2 * PIECE)
		return;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	if (!(h->thread = pthread_create(&h->th, NULL, hasher_main, h) == 0)) {
		pthread_mutex_destroy(&h->mu);
		pthread_cond_destroy(&h->cv);
	}
}

/* The copy has put in copied bytes (and stops there when failed). */
static void hasher_tell(hasher *h, uint64_t copied, bool failed)
{
	if (!h->thread)
		return;
	pthread_mutex_lock(&h->mu);
	h->copied = copied;
	h->failed = failed;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

/* The copy ended with rc: waits for the hash (or, for a small segment,
 * makes it now); the first failure of either. */
static int hasher_end(hasher *h, int rc)
{
	if (h->thread) {
		if (rc)
			hasher_tell(h, h->copied, true);
		pthread_join(h->th, NULL);
		pthread_mutex_destroy(&h->mu);
		pthread_cond_destroy(&h->cv);
		return rc ? rc : h->rc;
	}
	if (rc)
		return rc;
	unsigned char *buf = shoal_alloc(HASH_BUF);
	rc = buf ? hash_back(h->sfd, 0, h->len, h->hx, buf) : SHOAL_ENOMEM;
	if (buf)
		shoal_free(buf, HASH_BUF);
	return rc;
}

/* Writes len bytes of the sealed memfd sfd at off of fd, hashing them into
 * *x. The kernel copies them (sendfile: no page of the segment faulted
 * into this process, which on a VM costs more than the copy) while a
 * thread hashes them; a segment sendfile cannot read (hugetlbfs) goes
 * through a buffer. */
static int write_seg(int fd, uint64_t off, int sfd, uint64_t len, sh_hash *x)
{
	hasher h;
	hasher_start(&h, sfd, len, x, len);
	int rc = lseek(fd, (off_t)off, SEEK_SET) == (off_t)off ? 0 : shoal_errno();
	off_t in = 0;
	uint64_t done = 0;
	bool buffered = false;
	while (rc == 0 && done < len && !buffered) {
		size_t n = len - done < ((size_t)1 << 30) ? (size_t)(len - done) : (size_t)1 << 30;
		ssize_t k = sendfile(fd, sfd, &in, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EINVAL && done == 0)
			buffered = true;
		else if (k <= 0)
			rc = k == 0 ? SHOAL_EIO : shoal_errno();
		else
			done += (uint64_t)k;
	}
	unsigned char *b = buffered && rc == 0 ? shoal_alloc(HASH_BUF) : NULL;
	if (buffered && rc == 0 && !b)
		rc = SHOAL_ENOMEM;
	for (; b && rc == 0 && done < len; done += HASH_BUF) {
		size_t n = len - done < HASH_BUF ? (size_t)(len - done) : HASH_BUF;
		if ((rc = sh_fd_pread_all(sfd, b, n, done)) == 0)
			rc = sh_fd_pwrite_all(fd, b, n, off + done);
	}
	if (b)
		shoal_free(b, HASH_BUF);
	return hasher_end(&h, rc);
}

uint64_t sh_rec_len(const sh_state_rec *r, bool tight)
{
	uint64_t n = SH_REC_HDR + (uint64_t)r->nsegs * 8 + r->meta_len;
	if (tight && r->nsegs == 0)
		return n;
	n = page_up(n);
	for (uint32_t i = 0; i < r->nsegs; i++)
		n += page_up(r->seg_sizes[i]);
	return n;
}

static void head_pack(unsigned char *hd, const sh_state_rec *r, uint64_t data_hash)
{
	memset(hd, 0, SH_REC_HDR);
	memcpy(hd, MAGIC, 8);
	uint32_t v = VERSION, ns = r->nsegs;
	memcpy(hd + 8, &v, 4);
	memcpy(hd + 12, &ns, 4);
	put64(hd + 16, r->id);
	put64(hd + 24, r->sig);
	put64(hd + 32, r->gen);
	put64(hd + 40, r->meta_len);
	put64(hd + 48, data_hash);
	put64(hd + 56, sh_hash64(hd, 56, 0));
}

void sh_rec_encode(const sh_state_rec *r, unsigned char *out)
{
	SH_ASSERT(r->nsegs == 0);
	memcpy(out + SH_REC_HDR, r->meta, r->meta_len);
	head_pack(out, r, sh_hash64(r->meta, r->meta_len, sh_hash64(NULL, 0, 0)));
}

int sh_rec_write(int fd, uint64_t off, const sh_state_rec *r, bool tight)
{
	size_t tlen = (size_t)r->nsegs * 8, head = SH_REC_HDR + tlen + r->meta_len;
	unsigned char *b = shoal_alloc(head);
	if (!b)
		return SHOAL_ENOMEM;
	for (uint32_t i = 0; i < r->nsegs; i++)
		put64(b + SH_REC_HDR + 8 * i, r->seg_sizes[i]);
	memcpy(b + SH_REC_HDR + tlen, r->meta, r->meta_len);
	uint64_t h = sh_hash64(b + SH_REC_HDR, tlen, 0);
	h = sh_hash64(r->meta, r->meta_len, h);
	int rc = sh_fd_pwrite_all(fd, b + SH_REC_HDR, tlen + r->meta_len, off + SH_REC_HDR);
	uint64_t at = off + page_up(head), wend = off + head;
	for (uint32_t i = 0; rc == 0 && i < r->nsegs; i++) {
		sh_hash x;
		sh_hash64_begin(&x, r->seg_sizes[i], h);
		rc = write_seg(fd, at, r->seg_fds[i], r->seg_sizes[i], &x);
		h = sh_hash64_end(&x);
		wend = at + r->seg_sizes[i];
		at += page_up(r->seg_sizes[i]);
	}
	/* the padding a reader expects (a hole where nothing was written) */
	uint64_t end = off + sh_rec_len(r, tight);
	if (rc == 0 && end > wend) {
		unsigned char z = 0;
		rc = sh_fd_pwrite_all(fd, &z, 1, end - 1);
	}
	/* The header last: a record cut short has none that holds. */
	if (rc == 0) {
		head_pack(b, r, h);
		rc = sh_fd_pwrite_all(fd, b, SH_REC_HDR, off);
	}
	shoal_free(b, head);
	return rc;
}

uint32_t sh_rec_nsegs(const unsigned char h[SH_REC_HDR])
{
	uint32_t ns;
	memcpy(&ns, h + 12, 4);
	return memcmp(h, MAGIC, 8) == 0 && ns <= SH_REC_SEGS_MAX ? ns : 0;
}

void sh_rec_reader_fini(sh_rec_reader *x)
{
	if (x->buf)
		shoal_free(x->buf, x->cap);
	x->buf = NULL;
	x->cap = 0;
}

/* Copies len bytes at off of fd into the segment sfd by the kernel
 * (sendfile: no page of it faulted into this process, which on a VM costs
 * more than the copy), hashed into *hx (hasher). SHOAL_EINVAL when the segment's file system
 * takes no such copy (hugetlbfs). */
static int copy_seg(int fd, uint64_t off, int sfd, uint64_t len, sh_hash *hx)
{
	hasher h;
	hasher_start(&h, sfd, len, hx, 0);
	int rc = lseek(sfd, 0, SEEK_SET) == 0 ? 0 : shoal_errno();
	off_t in = (off_t)off;
	uint64_t done = 0;
	while (rc == 0 && done < len) {
		size_t n = len - done < PIECE ? (size_t)(len - done) : PIECE;
		ssize_t k = sendfile(sfd, fd, &in, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			rc = k == 0 ? SHOAL_EIO : shoal_errno();
			break;
		}
		/* The file's cached pages of this piece go back at once: kept,
		 * the object would be in memory twice, and the next piece's
		 * read would take fresh pages (on a VM the costly kind) rather
		 * than these. No-op on tmpfs, whose pages are the file. */
		(void)posix_fadvise(fd, (off_t)(off + done), (off_t)k, POSIX_FADV_DONTNEED);
		done += (uint64_t)k;
		hasher_tell(&h, done, false);
	}
	return hasher_end(&h, rc);
}

/* The same through a mapping, for segments sendfile cannot fill. */
static int read_seg_mapped(int fd, uint64_t off, int sfd, uint64_t len, uint64_t maplen,
			   sh_hash *hx)
{
	unsigned char *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (p == MAP_FAILED)
		return shoal_errno();
	int rc = 0;
	for (uint64_t done = 0; rc == 0 && done < len; done += PIECE) {
		size_t n = len - done < PIECE ? (size_t)(len - done) : PIECE;
		if ((rc = sh_fd_pread_all(fd, p + done, n, off + done)) == 0)
			sh_hash64_add(hx, p + done, n);
	}
	munmap(p, maplen);
	return rc;
}

/* Reads len bytes at off of fd into a fresh segment (from x->make),
 * hashing them into *hx, and seals it: *out. Until the seal no one but us
 * has the file, so what was hashed is what will be served. */
static int read_seg(sh_rec_reader *x, int fd, uint64_t off, uint64_t len, sh_hash *hx, int *out)
{
	int sfd = -1;
	uint64_t maplen;
	int rc = x->make(x->ctx, len, &sfd, &maplen);
	if (rc)
		return rc;
	sh_hash start = *hx;
	rc = copy_seg(fd, off, sfd, len, hx);
	if (rc == SHOAL_EINVAL) { /* hugetlbfs: through a mapping */
		*hx = start;
		rc = read_seg_mapped(fd, off, sfd, len, maplen, hx);
	}
	if (rc == 0)
		rc = sh_memfd_seal(sfd);
	if (rc) {
		close(sfd);
		return rc;
	}
	*out = sfd;
	return 0;
}

int sh_rec_read(sh_rec_reader *x, int fd, uint64_t off, uint64_t avail, bool exact, sh_state_rec *r,
		char *why, size_t whylen)
{
	unsigned char h[SH_REC_HDR];
	r->nsegs = 0; /* descriptors made so far */
	if (avail < SH_REC_HDR || sh_fd_pread_all(fd, h, SH_REC_HDR, off) != 0) {
		snprintf(why, whylen, "%" PRIu64 " bytes, shorter than a header (%d)", avail,
			 SH_REC_HDR);
		return SHOAL_EBADMSG;
	}
	uint32_t ver, nsegs;
	memcpy(&ver, h + 8, 4);
	memcpy(&nsegs, h + 12, 4);
	if (memcmp(h, MAGIC, 8) != 0 || load64(h + 56) != sh_hash64(h, 56, 0) || ver != VERSION) {
		snprintf(why, whylen,
			 "not a record of version %d (bad magic, version or header hash)", VERSION);
		return SHOAL_EBADMSG;
	}
	r->id = load64(h + 16);
	r->sig = load64(h + 24);
	r->gen = load64(h + 32);
	r->meta_len = load64(h + 40);
	/* every record's metadata is [name | nil, node]: 3 bytes at least */
	if (nsegs > SH_REC_SEGS_MAX || r->meta_len > META_MAX || r->meta_len < 3) {
		snprintf(
			why, whylen,
			"%u segments, %zu bytes of metadata; expected at most %u and 3 to %" PRIu64,
			nsegs, r->meta_len, SH_REC_SEGS_MAX, META_MAX);
		return SHOAL_EBADMSG;
	}
	/* the caller's arrays hold what it expects, which the file must not
	 * exceed (a rewritten one would write past them) */
	if (nsegs > r->seg_room) {
		snprintf(why, whylen, "%u segments, expected at most %u", nsegs, r->seg_room);
		return SHOAL_EBADMSG;
	}
	size_t tlen = (size_t)nsegs * 8, need = tlen + r->meta_len;
	/* checked before anything is allocated for it */
	if (need > avail - SH_REC_HDR) {
		snprintf(why, whylen, "%" PRIu64 " bytes, shorter than its table and metadata",
			 avail);
		return SHOAL_EBADMSG;
	}
	if (need > x->cap) {
		void *p = shoal_alloc(need);
		if (!p) {
			snprintf(why, whylen, "out of memory");
			return SHOAL_ENOMEM;
		}
		sh_rec_reader_fini(x);
		x->buf = p;
		x->cap = need;
	}
	if (sh_fd_pread_all(fd, x->buf, need, off + SH_REC_HDR) != 0) {
		snprintf(why, whylen, "%" PRIu64 " bytes, shorter than its table and metadata",
			 avail);
		return SHOAL_EBADMSG;
	}
	uint64_t expect = nsegs ? page_up(SH_REC_HDR + need) : SH_REC_HDR + need;
	for (uint32_t i = 0; i < nsegs; i++) {
		r->seg_sizes[i] = load64(x->buf + 8 * i);
		if (r->seg_sizes[i] == 0 || r->seg_sizes[i] > (uint64_t)INT64_MAX / 4 ||
		    (expect += page_up(r->seg_sizes[i])) > (uint64_t)INT64_MAX / 2) {
			snprintf(why, whylen, "segment %u of %" PRIu64 " bytes", i + 1,
				 r->seg_sizes[i]);
			return SHOAL_EBADMSG;
		}
	}
	/* a state file (exact) is padded even without segments */
	uint64_t padded = page_up(expect);
	if (exact ? avail != padded : avail < expect) {
		snprintf(why, whylen,
			 "%" PRIu64 " bytes, expected %" PRIu64 " (truncated or grown)", avail,
			 exact ? padded : expect);
		return SHOAL_EBADMSG;
	}
	r->len = exact ? padded : expect;
	r->meta = x->buf + tlen;
	if (x->head_only) {
		r->nsegs = nsegs;
		return 0;
	}
	int rc = x->fit ? x->fit(x->ctx, nsegs, r->seg_sizes, why, whylen) : 0;
	if (rc)
		return rc;
	uint64_t hh = sh_hash64(x->buf, tlen, 0);
	hh = sh_hash64(x->buf + tlen, r->meta_len, hh);
	uint64_t at = off + page_up(SH_REC_HDR + need);
	for (uint32_t i = 0; i < nsegs; i++) {
		sh_hash hx;
		sh_hash64_begin(&hx, r->seg_sizes[i], hh);
		if ((rc = read_seg(x, fd, at, r->seg_sizes[i], &hx, &r->seg_fds[i])) != 0) {
			snprintf(why, whylen, "segment %u: %s", i + 1, shoal_strerror(rc));
			return rc == SHOAL_EIO ? SHOAL_EBADMSG : rc;
		}
		hh = sh_hash64_end(&hx);
		r->nsegs = i + 1;
		at += page_up(r->seg_sizes[i]);
	}
	r->nsegs = nsegs;
	if (hh != load64(h + 48)) {
		snprintf(why, whylen, "its contents do not match its hash (corrupted)");
		return SHOAL_EBADMSG;
	}
	return 0;
}

int sh_rec_tree(const sh_state_rec *r, sh_bump *a, shoal_node **root, const char **name,
		uint32_t *name_len, char *why, size_t whylen)
{
	sh_mp m;
	sh_mp_init(&m, r->meta, r->meta_len);
	uint32_t n;
	*name = NULL;
	*name_len = 0;
	if (sh_mp_array(&m, &n) || n != 2 ||
	    (!sh_mp_take_nil(&m) &&
	     (sh_mp_str(&m, name, name_len) || *name_len == 0 || *name_len > SH_NODE_MAX_NAME ||
	      memchr(*name, 0, *name_len)))) {
		snprintf(why, whylen, "metadata: expected [name or nil, node]");
		return SHOAL_EBADMSG;
	}
	int rc = sh_node_decode(&m, a, root, why, whylen);
	if (rc == 0 && sh_mp_done(&m) != 0) {
		snprintf(why, whylen, "metadata: trailing bytes after the node");
		rc = SHOAL_EBADMSG;
	}
	if (rc == 0)
		rc = sh_node_check_types(*root, why, whylen);
	return rc;
}
