/* SPDX-License-Identifier: MIT */
/*
 * common.h - definitions every dcrfs module shares: error conventions,
 * logging, small helpers.
 *
 * Error convention (borrowed from erofs-utils): every function that can
 * fail returns 0 (or a non-negative count) on success and -errno on
 * failure, through every layer, so the FUSE layer replies with
 * fuse_reply_err(req, -ret). Library codes (zstd, SQLite, curl, HTTP)
 * are translated to errno once, where they are born, and their own
 * message is logged once there.
 */
#ifndef DCR_COMMON_H
#define DCR_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define DCR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DCR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DCR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define DCR_DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define DCR_ROUND_UP(n, d) (DCR_DIV_ROUND_UP(n, d) * (d))

#if defined(__GNUC__)
#define DCR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define DCR_UNUSED __attribute__((unused))
#define DCR_LIKELY(x) __builtin_expect(!!(x), 1)
#define DCR_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define DCR_PRINTF(f, a)
#define DCR_UNUSED
#define DCR_LIKELY(x) (x)
#define DCR_UNLIKELY(x) (x)
#endif

/** Log levels, most severe first. */
enum dcr_log_level {
	DCR_LOG_ERR = 0,
	DCR_LOG_WARN = 1,
	DCR_LOG_INFO = 2,
	DCR_LOG_DEBUG = 3,
};

/**
 * dcr_log_sink - where log lines go.
 *
 * The default sink writes "prog: level: message\n" to stderr. The FUSE
 * daemon installs a syslog sink once it has detached. Thread-safe: each
 * line is written with a single write(2).
 */
typedef void (*dcr_log_sink_fn)(enum dcr_log_level lvl, const char *msg);

/** Set the program name used as the log prefix (not copied). */
void dcr_log_set_prog(const char *prog);
/** Messages above @lvl are dropped. Default: DCR_LOG_INFO. */
void dcr_log_set_level(enum dcr_log_level lvl);
/** Replace the sink; NULL restores the stderr sink. */
void dcr_log_set_sink(dcr_log_sink_fn fn);
/**
 * dcr_log_to_file - also append every line, prefixed with a UTC time and
 * the pid, to @path (created 0640; O_APPEND, so several processes may
 * share it). @path NULL stops. Lines still go to the sink (or stderr)
 * unless dcr_log_quiet_sink(true). 0, or -errno with nothing changed.
 */
int dcr_log_to_file(const char *path);
/** With @quiet, lines go only to the log file, not to the sink or
 * stderr (a detached daemon with -o log=FILE). */
void dcr_log_quiet_sink(bool quiet);
/** Current level, to skip building expensive debug messages. */
enum dcr_log_level dcr_log_get_level(void);

/**
 * dcr_log_errors - the error lines (DCR_LOG_ERR, logged or not at the
 * current level) the calling thread emitted since its last
 * dcr_log_errors_reset, joined by newlines, at most 4 KiB (the rest is
 * cut). For a library's per-call error message. Thread-local storage:
 * valid until the thread's next log call.
 */
const char *dcr_log_errors(void);
void dcr_log_errors_reset(void);

/**
 * dcr_log_parse_level - "error", "warn" (or "warning"), "info" or
 * "debug" into *@out (-o log_level=, --log-level). 0 or -EINVAL.
 */
int dcr_log_parse_level(const char *s, enum dcr_log_level *out);
/**
 * dcr_log_errors_capture - while on (per thread), this thread's error
 * lines are only kept for dcr_log_errors (and the log file), not
 * written to the sink or stderr: a caller that reports them itself
 * (libdcr raising them in Python) shows each once. Returns the previous
 * setting.
 */
bool dcr_log_errors_capture(bool on);

/*
 * A job's error lines across threads. A caller (libdcr's public calls)
 * opens a scope on its thread for the length of a call; the jobs it
 * submits to a work queue carry the scope (wq.c takes a reference with
 * dcr_errscope_get and has the worker adopt it while the job runs), and
 * so do the jobs those submit. Every error line logged under the scope,
 * on any thread, is added to the caller's (dcr_log_errors after
 * dcr_log_scope_end, in the order they were logged, the first kept when
 * 4 KiB is full) and, when the caller captures its errors
 * (dcr_log_errors_capture), is held back from the sink and stderr like
 * the caller's own. A job still running when the call ended logs as
 * any thread does. Without a scope (the daemon) nothing changes.
 */
struct dcr_errscope;

/** dcr_log_scope_begin - open this thread's scope (after
 * dcr_log_errors_reset and dcr_log_errors_capture); nothing is
 * allocated until a job takes it. */
void dcr_log_scope_begin(void);

/**
 * dcr_log_scope_end - close this thread's scope: the lines its jobs'
 * threads logged meanwhile join this thread's (dcr_log_errors); later
 * lines of those jobs are theirs alone. Without an open scope, nothing.
 */
void dcr_log_scope_end(void);

/**
 * dcr_errscope_get - the scope this thread logs under now (its own open
 * one, made on first use, or the one of the job it runs), with a
 * reference for a job that will run on another thread: hand it to
 * dcr_errscope_adopt there and drop it with dcr_errscope_put. NULL when
 * there is none (or no memory: the job's errors are then only its
 * thread's).
 */
struct dcr_errscope *dcr_errscope_get(void);

/** dcr_errscope_adopt - log under @s (NULL: none) on this thread from
 * now on; returns the scope it logged under, to adopt again after. */
struct dcr_errscope *dcr_errscope_adopt(struct dcr_errscope *s);

/** dcr_errscope_put - drop a reference of dcr_errscope_get. NULL ok.
 * Thread-safe. */
void dcr_errscope_put(struct dcr_errscope *s);

/** Emit one log line (no trailing newline needed). */
void dcr_log(enum dcr_log_level lvl, const char *fmt, ...) DCR_PRINTF(2, 3);
void dcr_vlog(enum dcr_log_level lvl, const char *fmt, va_list ap);

#define dcr_err(...) dcr_log(DCR_LOG_ERR, __VA_ARGS__)
#define dcr_warn(...) dcr_log(DCR_LOG_WARN, __VA_ARGS__)
#define dcr_info(...) dcr_log(DCR_LOG_INFO, __VA_ARGS__)
#define dcr_debug(...)                                                 \
	do {                                                           \
		if (dcr_log_get_level() >= DCR_LOG_DEBUG)              \
			dcr_log(DCR_LOG_DEBUG, __VA_ARGS__);           \
	} while (0)

/*
 * DCR_ERR(e) - return value for a failure born here. In debug builds
 * (DCR_TRACE_ERRORS defined) it logs file:line where the error was born,
 * like zstd's RETURN_ERROR_IF; otherwise it is just (e).
 */
#ifdef DCR_TRACE_ERRORS
int dcr_trace_err(int e, const char *file, int line);
#define DCR_ERR(e) dcr_trace_err((e), __FILE__, __LINE__)
#else
#define DCR_ERR(e) (e)
#endif

/** strerror for a negative errno, thread-safe. */
const char *dcr_strerror(int neg_errno);

/** Current CLOCK_REALTIME in nanoseconds. */
int64_t dcr_now_ns(void);
/** CLOCK_MONOTONIC in nanoseconds. */
int64_t dcr_mono_ns(void);

/*
 * The process's stop: what the daemon says once its mount is gone (or a
 * signal ended its session loop), so that work still in flight ends now
 * instead of after its retries. Once requested it stays requested: store
 * requests in flight abort and new ones fail with -ECANCELED at once
 * (store/s3_request.c waits on dcr_stop_fd() beside its sockets), and
 * every sleep of a retry (dcr_stop_sleep_ns) wakes. A library user who
 * never requests it never sees it.
 */
/** Request the stop: async-signal-safe, idempotent, thread-safe. */
void dcr_stop_request(void);
/** Whether the stop was requested (thread-safe). */
bool dcr_stop_requested(void);
/** A descriptor that polls readable (POLLIN) once the stop is requested,
 *  for waits that watch other descriptors too; -1 if none can be made
 *  (then poll dcr_stop_requested()). Owned by the process; never close
 *  it. Thread-safe. */
int dcr_stop_fd(void);
/** Sleep @ns nanoseconds, or less if the stop is requested meanwhile:
 *  0 after the full sleep, -ECANCELED when stopped (at once if it
 *  already was). Thread-safe. */
int dcr_stop_sleep_ns(int64_t ns);

/* Little-endian fixed-width loads and stores (formats are little-endian). */
/**
 * dcr_partition_point - the one binary search: the index of the first of
 * @n elements for which @before(@arg, i) is false, where the elements are
 * ordered so that it is true for a prefix of them and false for the rest
 * (a lower bound: "element i sorts before the key in @arg"); @n if it is
 * true for all. @before is called O(log n) times, never with i >= @n.
 * Every sorted array's search is this (the helpers below, the cache's
 * slab table, the reader's versions, a manifest's paths).
 */
static inline size_t dcr_partition_point(size_t n,
					 bool (*before)(const void *arg, size_t i),
					 const void *arg)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (before(arg, mid))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* What dcr_lower_bound_u64 and dcr_first_ending_after search. */
struct dcr_bsearch_u64 {
	const char *base;
	size_t size, off_at, len_at;
	uint64_t key;
};

static inline bool dcr_bsearch_key_before(const void *arg, size_t i)
{
	const struct dcr_bsearch_u64 *b = (const struct dcr_bsearch_u64 *)arg;
	uint64_t k;

	memcpy(&k, b->base + i * b->size + b->off_at, sizeof(k));
	return k < b->key;
}

static inline bool dcr_bsearch_end_before(const void *arg, size_t i)
{
	const struct dcr_bsearch_u64 *b = (const struct dcr_bsearch_u64 *)arg;
	uint64_t off, len;

	memcpy(&off, b->base + i * b->size + b->off_at, sizeof(off));
	memcpy(&len, b->base + i * b->size + b->len_at, sizeof(len));
	return off + len <= b->key;
}

/*
 * dcr_lower_bound_u64 - the index of the first of the @n elements of
 * @base (each @size bytes, sorted ascending by the uint64_t at byte
 * offset @off) whose key is >= @key; @n if none (dcr_partition_point
 * over sorted version arrays).
 */
static inline size_t dcr_lower_bound_u64(const void *base, size_t n,
					 size_t size, size_t off, uint64_t key)
{
	const struct dcr_bsearch_u64 b = { .base = (const char *)base, .size = size,
					   .off_at = off, .key = key };

	return dcr_partition_point(n, dcr_bsearch_key_before, &b);
}

/*
 * dcr_first_ending_after - the index of the first of the @n extents of
 * @base (each @size bytes: a uint64_t start at byte offset @off_at and a
 * uint64_t length at @len_at; sorted by start, not overlapping, so their
 * ends ascend too) that ends after @x; @n if none (dcr_partition_point
 * over sorted extents: a hint's regions, a file's tensors).
 */
static inline size_t dcr_first_ending_after(const void *base, size_t n,
					    size_t size, size_t off_at,
					    size_t len_at, uint64_t x)
{
	const struct dcr_bsearch_u64 b = { .base = (const char *)base, .size = size,
					   .off_at = off_at, .len_at = len_at, .key = x };

	return dcr_partition_point(n, dcr_bsearch_end_before, &b);
}

/*
 * Little-endian loads and stores: one memcpy (a single unaligned move on
 * every target gcc and clang know) and a byte swap on big-endian hosts.
 * GCC 12 compiled the byte-at-a-time loops these replace into loops.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define DCR_LE16(x) __builtin_bswap16(x)
#define DCR_LE32(x) __builtin_bswap32(x)
#define DCR_LE64(x) __builtin_bswap64(x)
#else
#define DCR_LE16(x) (x)
#define DCR_LE32(x) (x)
#define DCR_LE64(x) (x)
#endif

static inline void dcr_put_le16(uint8_t *p, uint16_t v)
{
	v = DCR_LE16(v);
	memcpy(p, &v, sizeof(v));
}
static inline void dcr_put_le32(uint8_t *p, uint32_t v)
{
	v = DCR_LE32(v);
	memcpy(p, &v, sizeof(v));
}
static inline void dcr_put_le64(uint8_t *p, uint64_t v)
{
	v = DCR_LE64(v);
	memcpy(p, &v, sizeof(v));
}
static inline uint16_t dcr_get_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return DCR_LE16(v);
}
static inline uint32_t dcr_get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return DCR_LE32(v);
}
static inline uint64_t dcr_get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return DCR_LE64(v);
}

/**
 * dcr_parse_size - parse "123", "64K", "1M", "2G", "1T" (binary units,
 * optional trailing "iB"/"B") into bytes. Returns 0 or -EINVAL/-ERANGE.
 */
int dcr_parse_size(const char *s, uint64_t *out);

/** Parse a non-negative decimal integer that must fit in uint64_t. */
int dcr_parse_u64(const char *s, uint64_t *out);

/**
 * dcr_parse_ms - parse seconds written as a decimal number with up to
 * three decimals ("5", "0.25", "1.5") into milliseconds. 0, -EINVAL or
 * -ERANGE.
 */
int dcr_parse_ms(const char *s, uint64_t *ms);

/**
 * dcr_parse_duration - parse a duration: a non-negative integer with an
 * optional unit, s (the default), m, h, d or w ("90", "15m", "24h",
 * "7d") into seconds. 0, -EINVAL or -ERANGE.
 */
int dcr_parse_duration(const char *s, uint64_t *secs);

/**
 * dcr_format_size - human-readable size ("1.5 GiB") into @buf of @cap
 * bytes; returns @buf.
 */
char *dcr_format_size(uint64_t bytes, char *buf, size_t cap);

#ifdef DCR_TEST_HOOKS
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
/**
 * dcr_test_hook_cmd - test hooks only (HACKING): when the environment
 * variable @env is set and not empty, run `sh -c "$env" sh @arg` (no
 * argument when @arg is NULL) and wait for it to end, so that a test
 * acts exactly at the window where it is called. Its exit status is
 * ignored. Not for production builds (compiled only with
 * DCR_TEST_HOOKS). Thread-safe as fork(2) is.
 */
static inline void dcr_test_hook_cmd(const char *env, const char *arg)
{
	const char *cmd = getenv(env);
	pid_t pid;

	if (!cmd || !*cmd)
		return;
	pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, "sh", arg, (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}
#endif

#endif /* DCR_COMMON_H */
