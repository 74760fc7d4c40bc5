/*===- EmuAbi.h - The interface between emu kernel objects and the runtime ===*
 *
 * Generated kernels compiled for the emu backend form a shared object that
 * exports a kernel table and two setters; the runtime supplies the callbacks that
 * implement barriers and warp collectives on fibers. Plain C so that the object
 * and the runtime can be built by different compilers.
 *===----------------------------------------------------------------------===*/
#ifndef DLC_EMU_ABI_H
#define DLC_EMU_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

#define DLC_EMU_ABI_VERSION 5

typedef struct dlc_emu_dim3 {
  unsigned x, y, z;
} dlc_emu_dim3;

/* The state of one emulated CUDA thread. */
typedef struct dlc_emu_thread {
  dlc_emu_dim3 threadIdx;
  dlc_emu_dim3 blockIdx;
  dlc_emu_dim3 blockDim;
  dlc_emu_dim3 gridDim;
  void *dynamicSmem;
  void *scheduler; /* opaque to kernels */
} dlc_emu_thread;

/* Callbacks into the runtime. They act on the calling thread (the current fiber). */
typedef struct dlc_emu_api {
  /* `site` identifies the __syncthreads call in the source: the threads of a block
   * must meet at the same one (a GPU deadlocks or misbehaves otherwise). */
  void (*syncthreads)(const void *site);
  void (*syncwarp)(unsigned mask);
  /* Deposits `value`, waits for the warp, returns the value deposited by lane src. */
  unsigned long long (*warp_exchange)(unsigned long long value, int src, unsigned mask);
  /* Deposits `pred`, waits for the warp, returns the ballot of the lanes in mask. */
  unsigned (*ballot)(int pred, unsigned mask);
  void (*trap)(const char *message);
  /* A grid-wide barrier (cooperative launches: every block of the grid is resident). */
  void (*gridsync)(void);
  /* A load (write = 0) or store of `bytes` bytes at `address`, inside the checked range
   * (dlc_emu_set_checked): the runtime tracks initialisation and the last writer and
   * readers of each byte of shared memory. */
  void (*access)(const void *address, unsigned long long bytes, int write);
  /* The current block's storage for the static shared variable declared at `site`
   * (the kernel library's DLC_SHARED / DLC_SHARED_ALIGNED, which emu's prelude turns
   * into calls of this): the same address for every thread of the block, fresh for
   * each block. */
  void *(*static_shared)(const void *site, unsigned long long bytes, unsigned align);
  /* A warp-wide operation (ldmatrix, mma.sync), run once for the warp rather than once
   * per lane: each lane of `mask` deposits `operands` (its registers, on its own stack,
   * valid while it waits) and, once every lane of the mask has arrived, the last to
   * arrive calls op(lanes, mask), lanes[l] being lane l's operands (null outside the
   * mask); then the warp goes on. Lanes of one warp at different operations, or a lane
   * of the mask that has exited, are an error. */
  void (*warp_op)(void *operands, unsigned mask, void (*op)(void *const *lanes, unsigned mask));
  /* Inside a warp_op: the shared-memory accesses that follow are lane `lane`'s for
   * --check (-1: the calling thread's again). */
  void (*access_as_lane)(int lane);
  /* cp.async: copies `bytes` from global `src` to shared `dst` asynchronously, the
   * bytes past `src_bytes` zero (cp.async's src-size). The copy lands when the thread
   * waits for its group (cp_async_wait); under --check a read or write of the bytes
   * before then is reported. */
  void (*cp_async)(void *dst, const void *src, unsigned bytes, unsigned src_bytes);
  /* cp.async.commit_group: the thread's copies since the last commit form a group. */
  void (*cp_async_commit)(void);
  /* cp.async.wait_group n: completes all but the n most recent committed groups. */
  void (*cp_async_wait)(unsigned n);
} dlc_emu_api;

typedef struct dlc_emu_kernel {
  const char *name;
  /* Calls the kernel with its parameters read from `params`, laid out as the CUDA
   * ABI lays out a kernel's parameters (the launch's parameter buffer). */
  void (*thunk)(const void *params);
} dlc_emu_kernel;

/* Exported by a kernel object:
 *   int dlc_emu_abi_version(void);
 *   const dlc_emu_kernel *dlc_emu_kernels(int *count);
 *   void dlc_emu_set_api(const dlc_emu_api *api);
 *   void dlc_emu_set_thread(dlc_emu_thread *t);   -- per OS thread, before running t
 *   void dlc_emu_set_checked(unsigned long long base, unsigned long long bytes);
 *       -- the address range whose loads and stores go to dlc_emu_api.access (all the
 *          shared memory the runtime gives the module's blocks; empty without --check).
 *          The module is built with memory-access instrumentation whose callbacks (in
 *          dlc_emu_prelude.h, which defines this setter) test the range.
 */
typedef int (*dlc_emu_abi_version_fn)(void);
typedef const dlc_emu_kernel *(*dlc_emu_kernels_fn)(int *count);
typedef void (*dlc_emu_set_api_fn)(const dlc_emu_api *api);
typedef void (*dlc_emu_set_thread_fn)(dlc_emu_thread *t);
typedef void (*dlc_emu_set_checked_fn)(unsigned long long base, unsigned long long bytes);

#ifdef __cplusplus
}
#endif

#endif /* DLC_EMU_ABI_H */
