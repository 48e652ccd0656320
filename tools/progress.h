/* SPDX-License-Identifier: MIT */
/*
 * progress.h - the progress line dcrfs-commit and dcrfs-ctl print on
 * stderr: "PHASE: DONE / TOTAL (PCT%), RATE/s[, EXTRA][, ETA M:SS]",
 * redrawn in place on a terminal, or (--progress on a stderr that is not
 * one) a plain line every 5 s and at the end of each phase.
 */
#ifndef DCR_PROGRESS_H
#define DCR_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/** One tool's progress line. Single-threaded. */
struct progress {
	int tty;           /* show it, redrawn in place */
	int lines;         /* --progress without a tty: a line every 5 s */
	int drawn;         /* a redrawn line is on the terminal */
	int64_t t0;        /* the rate counts from here (0: not yet) */
	uint64_t done0;    /* what was done then */
	int64_t last_line;
};

/**
 * progress_init - decide whether @pg is shown: on a terminal unless
 * @quiet or @json (stdout is then for the JSON); always with @force
 * (--progress), as plain lines when stderr is not a terminal.
 */
void progress_init(struct progress *pg, bool force, bool quiet, bool json);

/** progress_on - whether @pg prints anything. */
static inline bool progress_on(const struct progress *pg)
{
	return pg->tty || pg->lines;
}

/**
 * progress_start - the rate and ETA of @pg count from now, when @done
 * (in the unit of the next progress_show) is done: at a new phase.
 */
void progress_start(struct progress *pg, uint64_t done);

/**
 * progress_show - report @done of @total in @phase: bytes when @unit is
 * NULL, else a count of @unit ("versions"). @extra (or NULL) is appended
 * after the rate. On plain lines, printed if 5 s went by since the last
 * one, or if @final (the end of a phase).
 */
void progress_show(struct progress *pg, const char *phase, uint64_t done,
		   uint64_t total, const char *unit, const char *extra, bool final);

/**
 * progress_clear - erase the redrawn line, if one is on the terminal,
 * before other output (it is drawn again at the next progress_show).
 */
void progress_clear(struct progress *pg);

#endif /* DCR_PROGRESS_H */
