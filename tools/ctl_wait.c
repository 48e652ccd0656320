/* SPDX-License-Identifier: MIT */
/*
 * ctl_wait.c - dcrfs-ctl wait MNT: block until the mount's /latest shows
 * a version newer than N, then print it. No store involved.
 *
 * It waits in poll(2) on MNT/.dcrfs/latest (fs/latestfile.c), which the
 * mount wakes the moment /latest moves: no polling of its own, no
 * timer but the --timeout. Exit 0 with the version on stdout, 1 on a
 * timeout (the version still shown on stdout with --json) or an error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "ctl.h"

/* The number in the file (pread at 0: that also re-arms its poll). */
static int read_latest(int fd, const char *path, uint64_t *v)
{
	char buf[32];
	ssize_t got;

	do
		got = pread(fd, buf, sizeof(buf) - 1, 0);
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		dcr_err("%s: %s", path, strerror(errno));
		return -1;
	}
	buf[got] = 0;
	if (got == 0 || buf[got - 1] != '\n') {
		dcr_err("%s: not a version number and a newline", path);
		return -1;
	}
	buf[got - 1] = 0;
	if (dcr_parse_u64(buf, v)) {
		dcr_err("%s: '%s' is not a version number", path, buf);
		return -1;
	}
	return 0;
}

static double mono_s(void)
{
	return (double)dcr_mono_ns() / 1e9;
}

int cmd_wait(const char *mnt, int have_newer, uint64_t newer,
	     double timeout_s, int json)
{
	char path[PATH_MAX];
	double start = mono_s();
	struct stat sb;
	uint64_t v;
	dev_t dev;
	int fd;

	if (ctl_check_mount(mnt, &dev))
		return EXIT_FAIL;
	if (snprintf(path, sizeof(path), "%s/.dcrfs/latest", mnt) >=
	    (int)sizeof(path)) {
		dcr_err("%s: name too long", mnt);
		return EXIT_FAIL;
	}
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		dcr_err("%s: %s (a dcrfs older than dcrfs-ctl, which has no "
			".dcrfs/latest? remount it)", path, strerror(errno));
		return EXIT_FAIL;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_dev != dev) {
		dcr_err("%s: not the latest file of the dcrfs mounted on %s",
			path, mnt);
		goto err_close;
	}
	if (read_latest(fd, path, &v))
		goto err_close;
	if (!have_newer)
		newer = v;
	while (v <= newer) {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLPRI };
		int ms = -1, n;

		if (timeout_s >= 0) {
			double left = timeout_s - (mono_s() - start);

			if (left <= 0)
				break;
			ms = (int)(left * 1000) + 1;
		}
		n = poll(&p, 1, ms);
		if (n < 0 && errno != EINTR) {
			dcr_err("%s: poll: %s", path, strerror(errno));
			goto err_close;
		}
		if (n <= 0)
			continue; /* EINTR, or the timeout (checked above) */
		if (read_latest(fd, path, &v))
			goto err_close;
		/* An error the read did not show: never spin on it. */
		if ((p.revents & (POLLERR | POLLNVAL)) && v <= newer) {
			dcr_err("%s: poll reports an error (is the dcrfs on %s "
				"still running?)", path, mnt);
			goto err_close;
		}
	}
	close(fd);
	if (json)
		printf("{\"version\": %" PRIu64 ", \"newer_than\": %" PRIu64
		       ", \"timed_out\": %s, \"waited_s\": %.3f}\n", v, newer,
		       v > newer ? "false" : "true", mono_s() - start);
	else if (v > newer)
		printf("%" PRIu64 "\n", v);
	if (v > newer)
		return 0;
	dcr_err("%s: latest is still v%" PRIu64 " after %g s (waiting for a "
		"version newer than v%" PRIu64 ")", mnt, v, timeout_s, newer);
	return EXIT_FAIL;

err_close:
	close(fd);
	return EXIT_FAIL;
}
