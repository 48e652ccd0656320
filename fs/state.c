/* SPDX-License-Identifier: MIT */
/*
 * state.c - the life of struct dcrfs's locks and tables (fs.h): made by
 * dcrfs_init_state once main.c has set the options, freed by
 * dcrfs_free_state once the session is over and every thread joined.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "fs.h"

int dcrfs_init_state(struct dcrfs *fs)
{
	pthread_condattr_t ca;
	int ret;

	ret = pthread_mutex_init(&fs->ver.refresh_lock, NULL);
	if (ret)
		return -ret;
	ret = pthread_mutex_init(&fs->tags.lock, NULL);
	if (ret)
		goto err_refresh;
	ret = pthread_mutex_init(&fs->bg.lock, NULL);
	if (ret)
		goto err_tag;
	ret = pthread_mutex_init(&fs->bk.lock, NULL);
	if (ret)
		goto err_bg_lock;
	ret = pthread_cond_init(&fs->bk.cv, NULL);
	if (ret)
		goto err_backing;
	ret = pthread_mutex_init(&fs->watch.lock, NULL);
	if (ret)
		goto err_backing_cv;
	ret = pthread_condattr_init(&ca);
	if (ret)
		goto err_watch;
	ret = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (ret == 0)
		ret = pthread_cond_init(&fs->bg.cond, &ca);
	pthread_condattr_destroy(&ca);
	if (ret)
		goto err_watch;
	ret = -dcrfs_delta_init(fs, fs->dv.tmpdir, fs->dv.budget);
	if (ret)
		goto err_cond;
	return 0;

err_cond:
	pthread_cond_destroy(&fs->bg.cond);
err_watch:
	pthread_mutex_destroy(&fs->watch.lock);
err_backing_cv:
	pthread_cond_destroy(&fs->bk.cv);
err_backing:
	pthread_mutex_destroy(&fs->bk.lock);
err_bg_lock:
	pthread_mutex_destroy(&fs->bg.lock);
err_tag:
	pthread_mutex_destroy(&fs->tags.lock);
err_refresh:
	pthread_mutex_destroy(&fs->ver.refresh_lock);
	return -ret;
}

void dcrfs_free_state(struct dcrfs *fs)
{
	dcrfs_delta_free(fs);
	for (size_t i = 0; i < fs->tags.n; i++)
		free(fs->tags.names[i]);
	free(fs->tags.names);
	fs->tags.names = NULL;
	fs->tags.n = fs->tags.cap = 0;
	pthread_cond_destroy(&fs->bg.cond);
	pthread_mutex_destroy(&fs->watch.lock);
	pthread_cond_destroy(&fs->bk.cv);
	pthread_mutex_destroy(&fs->bk.lock);
	pthread_mutex_destroy(&fs->bg.lock);
	pthread_mutex_destroy(&fs->tags.lock);
	pthread_mutex_destroy(&fs->ver.refresh_lock);
}
