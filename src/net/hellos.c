/* The handshakes in progress on a TCP listener (sh_hellos, net.h): slots
 * bounded in all and per source address, and a newcomer's way in when
 * silent strangers hold them all. Apart from tcp.c for linux/tcp.h's
 * struct tcp_info (bytes received), which glibc's netinet/tcp.h lacks. */
#include "net/net.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int sh_hellos_init(sh_hellos *h, uint32_t max, uint32_t per_source)
{
	*h = (sh_hellos){.max = max, .per_source = per_source};
	if (!(h->slots = shoal_calloc(max, sizeof(*h->slots))))
		return SHOAL_ENOMEM;
	for (uint32_t i = 0; i < max; i++)
		h->slots[i].fd = -1;
	return 0;
}

void sh_hellos_fini(sh_hellos *h)
{
	if (h->slots)
		shoal_free(h->slots, h->max * sizeof(*h->slots));
	h->slots = NULL;
}

/* Whether the peer of fd has sent nothing at all yet. */
static bool silent(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 &&
	       l >= offsetof(struct tcp_info, tcpi_bytes_received) +
			       sizeof(ti.tcpi_bytes_received) &&
	       ti.tcpi_bytes_received == 0;
}

int sh_hellos_take(sh_hellos *h, int fd, const char *who, char *why, size_t whylen)
{
	char source[64];
	const char *colon = strrchr(who, ':');
	size_t sl = colon ? (size_t)(colon - who) : strlen(who);
	snprintf(source, sizeof(source), "%.*s", (int)(sl < 63 ? sl : 63), who);
	uint32_t mine = 0;
	int free_slot = -1, oldest = -1;
	for (uint32_t i = 0; i < h->max; i++) {
		sh_hello *s = &h->slots[i];
		if (s->fd < 0) {
			if (free_slot < 0)
				free_slot = (int)i;
			continue;
		}
		mine += !strcmp(s->source, source);
		if (silent(s->fd) && (oldest < 0 || s->since < h->slots[oldest].since))
			oldest = (int)i;
	}
	if (mine >= h->per_source) {
		snprintf(why, whylen,
			 "%u handshakes from %s at once already (the most from one "
			 "address)",
			 mine, source);
		return -1;
	}
	if (free_slot < 0 && oldest < 0) {
		snprintf(why, whylen, "too many handshakes at once (%u)", h->max);
		return -1;
	}
	if (free_slot < 0) { /* a silent stranger gives its slot up */
		shutdown(h->slots[oldest].fd, SHUT_RDWR);
		h->slots[oldest].fd = -1;
		h->n--;
		h->evicted++;
		free_slot = oldest;
	}
	sh_hello *s = &h->slots[free_slot];
	s->fd = fd;
	s->since = shoal_now_ns();
	snprintf(s->source, sizeof(s->source), "%s", source);
	h->n++;
	return free_slot;
}

void sh_hellos_drop(sh_hellos *h, int i)
{
	if (i >= 0 && (uint32_t)i < h->max && h->slots[i].fd >= 0) {
		h->slots[i].fd = -1;
		h->n--;
	}
}
