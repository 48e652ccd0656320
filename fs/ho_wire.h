/* SPDX-License-Identifier: MIT */
/*
 * ho_wire.h - private to fs/handover.c, fs/hold.c and fs/ho_wire.c: the
 * messages a handover and a restart speak on their Unix sockets, the
 * STATE they carry, and what the serving daemon's side (handover.c) and
 * the holder's (hold.c) ask of each other. No other file includes it.
 *
 * A message is a 16-byte header (magic, type, payload length) and a
 * payload; STATE and HSTATE carry the /dev/fuse descriptor (SCM_RIGHTS).
 * The magic names the protocol: the messages and struct ho_wire are an
 * interface between two builds (the point is an upgrade), so changing
 * either needs a new HO_MAGIC, and an upgrade across it a remount (both
 * ends say so).
 *
 * systemd's fd store keeps the STATE in a file (fdstore.h) instead of a
 * holder's memory: the same bytes, after the fixed text.
 *
 * Order (handover.h): HELLO (the new daemon's dcrfs_ho_fixed) -> YES, or
 * NO with a reason -> GO -> STATE with the descriptor; from a holder the
 * same with HSTATE, after which the socket stays open as the restarted
 * daemon's link to the holder. On that link the daemon sends HELLO once
 * (its fixed text), then STATE without a descriptor at every change, and
 * RETIRE when the holder must exit.
 *
 * Thread-safety: ho_msg_send and ho_msg_recv may run on any thread, one
 * caller per socket at a time.
 */
#ifndef DCRFS_HO_WIRE_H
#define DCRFS_HO_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>

struct dcrfs;

/* ------------------------------------------------ the kernel's ABI */

struct ho_in_header {
	uint32_t len, opcode;
	uint64_t unique, nodeid;
	uint32_t uid, gid, pid;
	uint16_t total_extlen, padding;
};
_Static_assert(sizeof(struct ho_in_header) == 40, "fuse_in_header");

/* fuse_init_out, 64 bytes (passthrough.c's pt_init_out) */
struct ho_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2, max_stack_depth;
	uint32_t unused[6];
};
_Static_assert(sizeof(struct ho_init_out) == 64, "fuse_init_out");

#define HO_INIT_IN_MAX 64 /* fuse_init_in as of 7.36 */

/* ------------------------------------------------------ the protocol */

#define HO_MAGIC 0x44434831u /* "DCH1" */
#define HO_MSG_MAX (64u << 20)
#define HO_HELLO_WAIT_MS 5000
#define HO_GO_WAIT_MS 60000    /* the new daemon opens its store */
#define HO_STATE_WAIT_MS 60000 /* the old one answers what it read */

/* HO_HSTATE: a holder's STATE (its socket stays open: the new daemon's
 * link to the holder); HO_RETIRE: a daemon tells its holder to exit (the
 * mount was handed over, or is being unmounted). Both are spoken only on
 * the holder's socket and link, which builds without them never reach. */
enum { HO_HELLO = 1, HO_YES, HO_NO, HO_GO, HO_STATE, HO_HSTATE, HO_RETIRE };

struct ho_hdr {
	uint32_t magic, type, len, pad;
};

/* The STATE payload: this, then nbacking records (struct
 * dcrfs_backing_rec), ndelta keys (struct dcrfs_delta_key), ntags names
 * (each NUL-terminated), then struct ho_counts. */
struct ho_wire {
	uint32_t init_req_len;            /* bytes of init_req */
	uint8_t init_req[sizeof(struct ho_in_header) + HO_INIT_IN_MAX];
	struct ho_init_out init_rep;      /* as the kernel got it */
	int32_t pt_offered, pt_enabled, pt_disabled;
	uint32_t nbacking, ndelta, ntags, pad;
};

/*
 * The mount's counts, after the tag names: a trailer that builds before
 * it neither send nor read (they parse the tables and ignore what
 * follows; a STATE without it counts from 0), so adding it needed no new
 * HO_MAGIC. Fields are only ever appended (@len says how many came).
 */
#define HO_COUNTS_MAGIC 0x44434331u /* "DCC1" */
struct ho_counts {
	uint32_t magic, len;           /* HO_COUNTS_MAGIC, sizeof */
	uint64_t handovers, restarts;  /* of this mount, before this STATE */
	uint64_t resent;               /* requests the kernel sent again */
	char fdstate[48];              /* the sender's state file in
					* systemd's fd store (FDNAME), which
					* holds the connection too; "": none */
};

/* ------------------------------------------- messages (ho_wire.c) */

/**
 * ho_msg_send - send one message of @type whose payload is @a (@alen
 * bytes) then @b (@blen), with the descriptor @pass_fd (-1: none) on
 * @sock. 0 or -errno (-EMSGSIZE past HO_MSG_MAX, -EPIPE: the peer is
 * gone; never SIGPIPE).
 */
int ho_msg_send(int sock, uint32_t type, const void *a, size_t alen,
		const void *b, size_t blen, int pass_fd);

/**
 * ho_msg_recv - receive one message on @sock within @ms (per read): its
 * type, its payload (malloc'ed, NUL-terminated, *@len bytes; the
 * caller frees it) and a descriptor passed with it (*@fd, -1: none;
 * NULL: one is closed). 0, -ECONNRESET at end of file, -ETIMEDOUT,
 * -EPROTONOSUPPORT for another magic (another build's protocol), or
 * -errno.
 */
int ho_msg_recv(int sock, int ms, uint32_t *type, char **payload,
		size_t *len, int *fd);

/**
 * ho_listen - a Unix stream socket listening on @path, made afresh (a
 * file left there is unlinked), mode 0600; the file's identity in *@sb
 * unless NULL. The socket, or -errno (nothing left open).
 */
int ho_listen(const char *path, struct stat *sb);

/** ho_peer_ok - 0 when the peer of @sock is this user or root (its pid
 * in *@pid unless NULL), -EACCES when not, or -errno. */
int ho_peer_ok(int sock, pid_t *pid);

/**
 * ho_fixed_diff - the first line of @have (a dcrfs_ho_fixed text) that
 * @got lacks, said as a reason for a refusal (malloc'ed), or NULL when
 * @got repeats every line.
 */
char *ho_fixed_diff(const char *have, const char *got);

/** ho_refuse_peer - refuse the peer on @c: NO with @why (freed), logged
 * (info) after @who; @c is closed. */
void ho_refuse_peer(int c, char *why, const char *who);

/* ------------------------- what the holder asks of handover.c */

/**
 * ho_state_build - the whole STATE of @fs: the fixed part into @w, the
 * records and names into *@tail (malloc'ed, *@tlen bytes; the caller
 * frees it). -EAGAIN before the kernel's INIT was answered (nothing to
 * restart from yet), else 0 or -errno.
 */
int ho_state_build(struct dcrfs *fs, struct ho_wire *w, char **tail,
		   size_t *tlen);

/* ------------------------- what handover.c asks of the holder */

/** ho_keeper - what keeps a copy of the connection now: "holder",
 * "systemd" (its fd store) or "none". */
const char *ho_keeper(void);

/** ho_fdstate_name - the FDNAME of this daemon's state file in systemd's
 * fd store, or NULL (not in one). */
const char *ho_fdstate_name(void);

/** ho_hold_retire - tell this mount's holder to exit (a handover sent,
 * or an unmount) and forget it; with systemd's fd store, stop writing
 * its state, and at an unmount (@unmount) take both descriptors out of
 * the store. Nothing without a keeper. Thread-safe. */
void ho_hold_retire(int unmount);

/** ho_hold_relink - a restart: @sock (the socket on which the holder
 * gave the mount) is the link to the holder now (it closes at the exit);
 * send it @fs's state unless @tell is 0 (the adoption failed).
 * Thread-safe. */
void ho_hold_relink(struct dcrfs *fs, int sock, int tell);

/** ho_hold_init_answered - the kernel's INIT was answered: the holder
 * (if one was started) gets its first state. Thread-safe. */
void ho_hold_init_answered(void);

#endif /* DCRFS_HO_WIRE_H */
