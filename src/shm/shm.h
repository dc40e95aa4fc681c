/* The shm layer: memfd regions, their seals, and passing their file
 * descriptors to another process over a unix socket; and moving bytes in
 * and out of a descriptor by the kernel (whole preads and pwrites, copies
 * between files), so that no page of a region is faulted into this
 * process. Everything above that shares memory across processes (rings,
 * blobs) is built from these. */
#ifndef SHOAL_SHM_H
#define SHOAL_SHM_H

#include "shoal_impl.h"

#include <sys/types.h>

/* A new anonymous shared-memory file of size bytes (close-on-exec). With
 * sealable, sh_memfd_seal() can later make it immutable. */
int sh_memfd_create(const char *name, size_t size, bool sealable, int *fd_out);

/* Maps size bytes of fd shared, read-write or read-only. A writable
 * mapping of a file whose pages all exist is populated at once. */
int sh_shm_map(int fd, size_t size, bool writable, void **out);
/* The same for a file that may be of huge pages (a store segment): *size
 * becomes the length mapped, rounded up to a whole huge page for a
 * hugetlbfs file, which is what sh_shm_unmap must be given. */
int sh_shm_map_len(int fd, size_t *size, bool writable, void **out);
void sh_shm_unmap(void *p, size_t size);
/* Has the pages of [off, off + len) of a read-only mapping of maplen
 * bytes mapped now, in one call (a reader that will touch them all: a
 * fault a 4 KiB page would cost several times the copy). Where the kernel
 * cannot, the reads fault them in as usual. */
void sh_shm_populate_read(void *map, size_t maplen, uint64_t off, uint64_t len);
/* Whether every page of fd's size exists already (huge pages allocated
 * when made, a spare): a writer then maps it populated and copies by
 * memcpy, which costs no fault a page. */
bool sh_fd_pages_exist(int fd);

/* Seals fd against every change of contents or size. Fails with
 * SHOAL_EBUSY while a writable shared mapping of it exists anywhere. */
int sh_memfd_seal(int fd);
/* Whether fd carries the seals of sh_memfd_seal (a receiver checks this
 * before it trusts a region to stay as it is). */
bool sh_memfd_is_sealed(int fd);
/* Fixes fd's size for good (shrink, grow and the seal itself), leaving its
 * contents writable: for memory shared read-write with a peer (rings), which
 * must not be able to truncate it under the other side's mappings (SIGBUS).
 * fd must come from sh_memfd_create(..., sealable = true). */
int sh_memfd_fix_size(int fd);
/* The same without the seal on seals, for a region that is to be sealed
 * for good later (a store segment: fixed size while its creator writes it,
 * then sh_memfd_seal). */
int sh_memfd_fix_size_open(int fd);
/* Forbids every new write to fd (F_SEAL_FUTURE_WRITE): write(2), and
 * writable mappings made from now on, by anyone, whatever descriptor or
 * /proc path they come through; mappings that exist keep writing. For a
 * region only its creator writes (the store's arena). Also fixes the size. */
int sh_memfd_freeze_others(int fd);
/* Whether fd's size is fixed (a receiver checks this before it maps memory
 * its peer shares read-write). */
bool sh_memfd_size_fixed(int fd);

/* Writes all n bytes at off (pwrite until done). Into a memfd this is the
 * kernel's copy: no page of the file is mapped or faulted in this process,
 * which on VMs costs more than the copy itself. */
int sh_fd_pwrite_all(int fd, const void *p, size_t n, uint64_t off);
/* Reads all n bytes at off: SHOAL_EIO when the file ends first. */
int sh_fd_pread_all(int fd, void *p, size_t n, uint64_t off);

/* Copies len bytes of in at in_off to out at out_off, by the kernel
 * (copy_file_range, else sendfile: no page passes through this process).
 * SHOAL_EIO when in ends early. */
int sh_fd_copy(int out, uint64_t out_off, int in, uint64_t in_off, uint64_t len);

/* The most descriptors one message carries. */
#define SH_FD_MAX 16

/* Sends len bytes (at least 1) and nfds descriptors in one message. */
int sh_fd_send(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* Receives one message of at most len bytes and at most maxfds descriptors
 * (close-on-exec). A message that carried more descriptors than that, or was
 * longer than len, is an error and every descriptor it brought is closed.
 * *got = 0 means the peer closed the connection. */
int sh_fd_recv(int sock, void *buf, size_t len, size_t *got, int *fds, int maxfds, int *nfds);

/* The peer of a connected unix socket. */
int sh_peer_cred(int sock, pid_t *pid, uid_t *uid, gid_t *gid);

#endif
