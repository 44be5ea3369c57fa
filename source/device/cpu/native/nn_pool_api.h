/* The cpu device's thread pool (kernels.c, nn_pool_run) as a C API for the device's other extension module,
 * the integer kernels (qnative/qkernels.c), so their parts run on the same persistent, pinned workers as the
 * float kernels' instead of threads started per call.
 *
 * Exported the CPython way, as a capsule: nnhal.device.cpu.native._kernels.pool_api holds an nn_pool_api
 * (PyCapsule_Import(NN_POOL_API_CAPSULE, 0) returns it). Its layout is versioned: a reader checks version and
 * size before using it and keeps to its own threads otherwise (or when the native kernels are not built).
 *
 * kernels.c defines NN_POOL_API_PROVIDER before including this header, after the pool itself, and calls
 * nn_pool_api_export(module) from its init; a reader includes it plain for the types and the name.
 */
#ifndef NN_POOL_API_H
#define NN_POOL_API_H

#include <stdint.h>

#define NN_POOL_API_CAPSULE "nnhal.device.cpu.native._kernels.pool_api"
#define NN_POOL_API_VERSION 1

/* one part of a split job: fn(args, part, parts) for part in [0, parts), on any thread, in any order */
typedef void (*nn_pool_api_task)(const void *args, int64_t part, int64_t parts);

typedef struct {
    int32_t version;                 /* NN_POOL_API_VERSION */
    int32_t size;                    /* sizeof(nn_pool_api) */
    /* runs every part, on the caller and the pool's workers, and returns when all are done; all on the caller
       when the pool is busy (another thread's job) or has fewer than parts - 1 workers. Call without the GIL. */
    void (*run)(nn_pool_api_task fn, const void *args, int64_t parts);
    /* the pool's workers (threads beside the caller) now */
    int64_t (*workers)(void);
} nn_pool_api;

#ifdef NN_POOL_API_PROVIDER
static int64_t nn_pool_api_workers(void) { return __atomic_load_n(&nn_pool.workers, __ATOMIC_ACQUIRE); }

static const nn_pool_api nn_pool_api_table = {NN_POOL_API_VERSION, (int32_t)sizeof(nn_pool_api), nn_pool_run,
                                              nn_pool_api_workers};

/* adds the capsule to the module ``m``: 0, or -1 with an exception set */
static int nn_pool_api_export(PyObject *m) {
    PyObject *capsule = PyCapsule_New((void *)&nn_pool_api_table, NN_POOL_API_CAPSULE, NULL);
    if (capsule == NULL) return -1;
    if (PyModule_AddObject(m, "pool_api", capsule) < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    return 0;
}
#endif

#endif
