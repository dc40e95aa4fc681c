/* The whole public API of libshoal: include this, link -lshoal. */
#ifndef SHOAL_SHOAL_H
#define SHOAL_SHOAL_H

#include <shoal/base.h>
#include <shoal/cluster.h>
#include <shoal/ext.h>
#include <shoal/fiber.h>
#include <shoal/remote.h>
#include <shoal/rpc.h>
#include <shoal/store.h>
#include <shoal/tasks.h>

#define SHOAL_VERSION_MAJOR 0
#define SHOAL_VERSION_MINOR 1
#define SHOAL_VERSION_PATCH 0
#define SHOAL_VERSION_STRING "0.1.0"

#endif
