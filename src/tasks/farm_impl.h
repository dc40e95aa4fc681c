/* The farm client's insides, shared by its files: farm.c (the handle:
 * connecting, closing, the store objects made for tasks), farm_submit.c
 * (tasks into SUBMIT batches, and batches to the controller) and
 * farm_wait.c (results and the controller's status, and the waits). */
#ifndef SHOAL_TASKS_FARM_IMPL_H
#define SHOAL_TASKS_FARM_IMPL_H

#include "net/net.h"
#include "rpc/value.h"
#include "tasks/proto.h"

/* A task's result as it came. */
typedef struct tk_res {
	uint8_t state; /* 0: not yet, 1: here, 2: taken */
	int32_t status;
	uint64_t off; /* in rbuf */
	uint32_t len;
	uint32_t nmade; /* store objects made for its arguments (in made) */
	shoal_id *made;
} tk_res;

struct shoal_farm {
	sh_link l;
	int tcp;	/* the controller over TCP (then l is unused), or -1 */
	sh_channel *ch; /* the secure channel on tcp */
	/* how long a blocking call waits for the controller to take or send
	 * anything (shoal_farm_set_timeout); 0: as long as it takes */
	int64_t timeout_ns;
	sh_wbuf sub; /* the SUBMIT batch being built */
	/* a task with large arguments: its frame, and its fn and args */
	sh_wbuf one, call;
	sh_msg_part *parts;
	uint32_t cap_parts;
	uint32_t nsub;
	/* Batches closed but not yet in the ring or socket (it was full):
	 * sent as it drains, so that submitting never waits for the
	 * controller. sent: bytes of the first already written. */
	sh_wbuf *queue;
	uint32_t nqueue, cap_queue;
	size_t sent;
	uint64_t next_id; /* the last id given */
	/* results of tasks base .. next_id: res[id - base] */
	tk_res *res;
	uint64_t base;
	size_t cap_res;
	unsigned char *rbuf;
	size_t rlen, rcap;
	uint64_t here, taken; /* results in, and taken, of base .. next_id */
	uint64_t scan;	      /* every result before res[scan] is taken */
	unsigned char *in;
	size_t in_cap;
	/* A message read in part when a wait's deadline came: the next read
	 * goes on with it (begun again, it would read its middle as a start). */
	size_t in_got, in_len;
	/* shared arguments: the store, and a vbuf to share a submission in */
	shoal_client *store;
	/* objects of taken results left for shoal_farm_drop_taken */
	bool defer;
	shoal_id *later;
	uint32_t nlater, cap_later;
	shoal_vbuf *share;
	/* the controller's last STATUS answer, and how many came */
	shoal_controller_stat st;
	shoal_farm_engine *eng;
	uint32_t neng, cap_eng;
	uint64_t answers;
	bool asking;	 /* a timed-out wait asks (no asking within) */
	bool told;	 /* "no engine" has been logged once */
	char where[128]; /* the controller's socket, for messages */
};

/* farm.c: the store objects made for a task's arguments go once its
 * result is taken; those an engine made for a result (the list after the
 * value, at m) are ours to delete. */
void sh_farm_drop_made(shoal_farm *f, tk_res *r);
void sh_farm_drop_result_objects(shoal_farm *f, sh_mp *m);
/* The deadline of a wait for the controller's ring: the caller's, or
 * sooner by the connection's timeout. */
int64_t sh_farm_ring_deadline(const shoal_farm *f, int64_t deadline);

/* farm_submit.c: the queue of closed frames to the controller. */
int sh_farm_queue_frame(shoal_farm *f, sh_wbuf *w);
int sh_farm_send_batch(shoal_farm *f, bool block, int64_t deadline);
int sh_farm_drain(shoal_farm *f, bool block, int64_t deadline);

#endif
