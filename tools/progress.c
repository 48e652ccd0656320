/* SPDX-License-Identifier: MIT */
/* progress.c - the tools' progress line on stderr (progress.h). */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "common.h"
#include "progress.h"

#define LINE_EVERY_NS 5000000000LL
/* an ETA from under this much of a phase is noise (it read 340:17) */
#define ETA_AFTER_NS 2000000000LL

void progress_init(struct progress *pg, bool force, bool quiet, bool json)
{
	bool tty = isatty(STDERR_FILENO);

	*pg = (struct progress){ 0 };
	pg->tty = tty && (force || (!quiet && !json));
	pg->lines = force && !tty;
}

void progress_start(struct progress *pg, uint64_t done)
{
	pg->t0 = dcr_mono_ns();
	pg->done0 = done;
}

/* @v in @unit (NULL: bytes) into @buf. */
static const char *amount(uint64_t v, const char *unit, char *buf, size_t cap)
{
	if (!unit)
		return dcr_format_size(v, buf, cap);
	snprintf(buf, cap, "%" PRIu64, v);
	return buf;
}

void progress_show(struct progress *pg, const char *phase, uint64_t done,
		   uint64_t total, const char *unit, const char *extra, bool final)
{
	char d[32], t[32], r[48], eta[32] = "";

	if (!progress_on(pg))
		return;
	int64_t now = dcr_mono_ns();
	if (pg->lines) {
		if (now - pg->last_line < LINE_EVERY_NS && !final)
			return;
		pg->last_line = now;
	}
	double secs = pg->t0 ? (double)(now - pg->t0) / 1e9 : 0;
	double rate = secs > 0 && done > pg->done0 ? (double)(done - pg->done0) / secs : 0;
	if (secs * 1e9 >= ETA_AFTER_NS && rate > 0 && done < total) {
		double left = DCR_MIN((double)(total - done) / rate, 359999);
		snprintf(eta, sizeof(eta), ", ETA %d:%02d", (int)left / 60, (int)left % 60);
	}
	if (unit)
		snprintf(r, sizeof(r), "%.1f %s", rate, unit);
	else
		dcr_format_size((uint64_t)rate, r, sizeof(r));
	fprintf(stderr, "%s%s: %s / %s%s%s (%3.0f%%), %s/s%s%s%s%s",
		pg->tty ? "\r\033[K" : "", phase, amount(done, unit, d, sizeof(d)),
		amount(total, unit, t, sizeof(t)), unit ? " " : "", unit ? unit : "",
		total ? 100.0 * (double)DCR_MIN(done, total) / (double)total : 100.0, r,
		extra ? ", " : "", extra ? extra : "", eta, pg->tty ? "" : "\n");
	pg->drawn = pg->tty;
}

void progress_clear(struct progress *pg)
{
	if (!pg->drawn)
		return;
	fputs("\r\033[K", stderr);
	pg->drawn = 0;
}
