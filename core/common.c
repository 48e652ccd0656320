/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static const char *log_prog = "dcrfs";
static enum dcr_log_level log_level = DCR_LOG_INFO;
static const char *const level_names[] = {
	[DCR_LOG_ERR] = "error",
	[DCR_LOG_WARN] = "warning",
	[DCR_LOG_INFO] = "info",
	[DCR_LOG_DEBUG] = "debug",
};

static dcr_log_sink_fn log_sink;
static int log_file_fd = -1;
static bool log_sink_quiet;

void dcr_log_set_prog(const char *prog) { log_prog = prog; }
void dcr_log_set_level(enum dcr_log_level lvl) { log_level = lvl; }
void dcr_log_set_sink(dcr_log_sink_fn fn) { log_sink = fn; }
enum dcr_log_level dcr_log_get_level(void) { return log_level; }

int dcr_log_parse_level(const char *s, enum dcr_log_level *out)
{
	for (size_t i = 0; i < DCR_ARRAY_SIZE(level_names); i++) {
		if (strcmp(s, level_names[i]) == 0 ||
		    (i == DCR_LOG_WARN && strcmp(s, "warn") == 0)) {
			*out = (enum dcr_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}
void dcr_log_quiet_sink(bool quiet) { log_sink_quiet = quiet; }

int dcr_log_to_file(const char *path)
{
	int fd = -1;

	if (path) {
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (fd < 0)
			return -errno;
	}
	if (log_file_fd >= 0)
		close(log_file_fd);
	log_file_fd = fd;
	return 0;
}

/* "2026-12-01T12:34:56.789Z prog[pid]: level: msg\n" to the log file. */
static void log_file_line(enum dcr_log_level lvl, const char *msg)
{
	struct timespec ts;
	struct tm tm;
	char line[1300];
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%ld]: %s: %s\n",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_prog,
		     (long)getpid(), level_names[lvl], msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	ssize_t w DCR_UNUSED = write(log_file_fd, line, (size_t)n);
}


/* This thread's error lines since dcr_log_errors_reset (dcr_log_errors).
 * DCR_LOG_ERR is the lowest level, so errors are always formatted. */
static __thread char tl_errors[4096];
static __thread size_t tl_errors_len;
static __thread bool tl_errors_captured;

bool dcr_log_errors_capture(bool on)
{
	bool was = tl_errors_captured;

	tl_errors_captured = on;
	return was;
}

/* A scope of this thread's: its caller forgets its lines too. */
static void scope_reset(void);

void dcr_log_errors_reset(void)
{
	tl_errors_len = 0;
	tl_errors[0] = 0;
	scope_reset();
}

const char *dcr_log_errors(void)
{
	return tl_errors;
}

/* Append the line @msg to @buf (@cap bytes, *@len used), cut at @cap. */
static void append_line(char *buf, size_t cap, size_t *len, const char *msg)
{
	size_t room = cap - *len;
	int n = snprintf(buf + *len, room, "%s%s", *len ? "\n" : "", msg);

	if (n > 0)
		*len += DCR_MIN((size_t)n, room - 1);
}

/* A job's error lines across threads (common.h). */
struct dcr_errscope {
	atomic_int refs;
	pthread_mutex_t lock;   /* guards the rest */
	bool open;              /* until its caller's dcr_log_scope_end */
	bool quiet;             /* the caller captures its errors */
	size_t len;
	char text[sizeof(tl_errors)];
};

/* The scope this thread logs under: its own (made on first use while
 * tl_scope_open) or the one of the job it runs (adopted). */
static __thread struct dcr_errscope *tl_scope;
static __thread bool tl_scope_open; /* between begin and end, as caller */

static void scope_reset(void)
{
	struct dcr_errscope *s = tl_scope;

	if (!tl_scope_open || !s)
		return;
	pthread_mutex_lock(&s->lock);
	s->len = 0;
	s->text[0] = 0;
	pthread_mutex_unlock(&s->lock);
}

void dcr_log_scope_begin(void)
{
	tl_scope_open = true;
}

void dcr_log_scope_end(void)
{
	struct dcr_errscope *s = tl_scope;

	if (!tl_scope_open)
		return;
	tl_scope_open = false;
	if (!s)
		return;
	tl_scope = NULL;
	pthread_mutex_lock(&s->lock);
	s->open = false;
	memcpy(tl_errors, s->text, s->len + 1);
	tl_errors_len = s->len;
	pthread_mutex_unlock(&s->lock);
	dcr_errscope_put(s);
}

struct dcr_errscope *dcr_errscope_get(void)
{
	struct dcr_errscope *s = tl_scope;

	if (!s && tl_scope_open) {
		/* The caller's first job: the scope starts with the lines
		 * the caller has logged so far. */
		if (!(s = malloc(sizeof(*s))))
			return NULL;
		atomic_init(&s->refs, 1); /* the caller's, until the end */
		pthread_mutex_init(&s->lock, NULL);
		s->open = true;
		s->quiet = tl_errors_captured;
		s->len = tl_errors_len;
		memcpy(s->text, tl_errors, tl_errors_len + 1);
		tl_scope = s;
	}
	if (s)
		atomic_fetch_add(&s->refs, 1);
	return s;
}

struct dcr_errscope *dcr_errscope_adopt(struct dcr_errscope *s)
{
	struct dcr_errscope *was = tl_scope;

	tl_scope = s;
	return was;
}

void dcr_errscope_put(struct dcr_errscope *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Keep the error line @msg: this thread's, and its scope's while open.
 * Whether the line is to be held back from the sink (its scope's caller
 * captures errors). */
static bool record_error(const char *msg)
{
	struct dcr_errscope *s = tl_scope;
	bool quiet = false;

	append_line(tl_errors, sizeof(tl_errors), &tl_errors_len, msg);
	if (s) {
		pthread_mutex_lock(&s->lock);
		if (s->open) {
			append_line(s->text, sizeof(s->text), &s->len, msg);
			quiet = s->quiet;
		}
		pthread_mutex_unlock(&s->lock);
	}
	return quiet;
}

void dcr_vlog(enum dcr_log_level lvl, const char *fmt, va_list ap)
{
	char msg[1024];

	if (lvl > log_level) /* never for DCR_LOG_ERR */
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	bool quiet = lvl == DCR_LOG_ERR && (record_error(msg) || tl_errors_captured);
	if (log_file_fd >= 0) {
		log_file_line(lvl, msg);
		if (log_sink_quiet)
			return;
	}
	if (quiet)
		return;
	if (log_sink) {
		log_sink(lvl, msg);
		return;
	}
	char line[1200];
	int n = snprintf(line, sizeof(line), "%s: %s: %s\n", log_prog,
			 level_names[lvl], msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	/* One write(2) per line so concurrent threads never interleave. */
	ssize_t w DCR_UNUSED = write(STDERR_FILENO, line, (size_t)n);
}

void dcr_log(enum dcr_log_level lvl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	dcr_vlog(lvl, fmt, ap);
	va_end(ap);
}

#ifdef DCR_TRACE_ERRORS
int dcr_trace_err(int e, const char *file, int line)
{
	dcr_debug("error %d (%s) born at %s:%d", e, dcr_strerror(e), file,
		  line);
	return e;
}
#endif

const char *dcr_strerror(int neg_errno)
{
	static __thread char buf[128];
	int e = neg_errno < 0 ? -neg_errno : neg_errno;

	/* GNU strerror_r may return a static string instead of filling buf. */
	return strerror_r(e, buf, sizeof(buf));
}

int64_t dcr_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dcr_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------ the stop */

static atomic_bool stop_flag;
static atomic_int stop_efd = -1;
static pthread_once_t stop_once = PTHREAD_ONCE_INIT;

/* An eventfd that is written once, when the stop is requested, and never
 * read: it stays readable. Whichever of the two (this, the request) runs
 * second sees the other's store (both sequentially consistent), so a
 * request that raced the creation still makes it readable. */
static void stop_fd_make(void)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	uint64_t one = 1;

	if (fd < 0)
		return;
	atomic_store(&stop_efd, fd);
	if (atomic_load(&stop_flag) && write(fd, &one, sizeof(one)) < 0) {
		/* already readable (the counter is not 0) */
	}
}

void dcr_stop_request(void)
{
	uint64_t one = 1;
	int fd;

	atomic_store(&stop_flag, true);
	fd = atomic_load(&stop_efd);
	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
		/* already readable */
	}
}

bool dcr_stop_requested(void)
{
	return atomic_load_explicit(&stop_flag, memory_order_acquire);
}

int dcr_stop_fd(void)
{
	pthread_once(&stop_once, stop_fd_make);
	return atomic_load(&stop_efd);
}

int dcr_stop_sleep_ns(int64_t ns)
{
	int fd = dcr_stop_fd();
	int64_t end = dcr_mono_ns() + ns;

	for (;;) {
		if (dcr_stop_requested())
			return -ECANCELED;
		int64_t left = end - dcr_mono_ns();
		if (left <= 0)
			return 0;
		/* Without the eventfd, look at the flag every 50 ms. */
		int64_t slice = fd >= 0 ? left : DCR_MIN(left, 50000000LL);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct timespec ts = { slice / 1000000000, slice % 1000000000 };
		ppoll(fd >= 0 ? &p : NULL, fd >= 0 ? 1 : 0, &ts, NULL);
	}
}

int dcr_parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

int dcr_parse_duration(const char *s, uint64_t *secs)
{
	static const struct {
		char unit;
		uint64_t mul;
	} units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 },
		      { 'w', 7 * 86400 } };
	uint64_t v = 0;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (!*p) {
		*secs = v;
		return 0;
	}
	if (p[1])
		return -EINVAL;
	for (size_t i = 0; i < DCR_ARRAY_SIZE(units); i++) {
		if (*p != units[i].unit)
			continue;
		if (v > UINT64_MAX / units[i].mul)
			return -ERANGE;
		*secs = v * units[i].mul;
		return 0;
	}
	return -EINVAL;
}

int dcr_parse_ms(const char *s, uint64_t *ms)
{
	uint64_t whole = 0, frac = 0;
	const char *p = s;
	int digits = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (whole > (UINT64_MAX / 1000 - 9) / 10)
			return -ERANGE;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		for (; isdigit((unsigned char)*p); p++, digits++) {
			if (digits >= 3)
				return -EINVAL; /* finer than a millisecond */
			frac = frac * 10 + (uint64_t)(*p - '0');
		}
		for (int k = digits; k < 3; k++)
			frac *= 10;
	}
	if (*p)
		return -EINVAL;
	*ms = whole * 1000 + frac;
	return 0;
}

int dcr_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (toupper((unsigned char)*end)) {
	case 0:
		break;
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	case 'B': break;
	default:
		return -EINVAL;
	}
	if (shift && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

char *dcr_format_size(uint64_t bytes, char *buf, size_t cap)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < DCR_ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}
