/*===- dlc/runtime.h - The dlc runtime C API --------------------------------===*
 *
 * A stable C interface (C89-compatible) to load compiled .dlc packages and run
 * them. Handles are opaque; every function returns a dlc_status, and
 * dlc_last_error() gives the message of the calling thread's last failure. No
 * C++ exception crosses this boundary, and no call crashes on a null handle or a
 * wrong size: it returns DLC_ERROR_INVALID_ARGUMENT.
 *
 * Types: plain C89 (dims are `long`, device pointers `unsigned long`: 64 bits on the
 * LP64 Linux targets dlc supports).
 *
 * Threads: a dlc_model is immutable once loaded and may be shared by any number of
 * threads. A dlc_session is used by one thread at a time (one session per thread);
 * sessions created from the same model on the same device share that model's
 * weights (uploaded once), so concurrent sessions cost only their own arenas.
 *===------------------------------------------------------------------------===*/
#ifndef DLC_RUNTIME_H
#define DLC_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DLC_RUNTIME_API_VERSION 6

typedef struct dlc_model dlc_model;
typedef struct dlc_session dlc_session;

typedef enum dlc_status {
  DLC_OK = 0,
  DLC_ERROR_INVALID_ARGUMENT = 1, /* wrong name, size, dtype, null handle, missing input */
  DLC_ERROR_INVALID_PACKAGE = 2,  /* malformed or corrupted .dlc */
  DLC_ERROR_UNAVAILABLE = 3,      /* the requested device, driver or library is missing */
  DLC_ERROR_LAUNCH = 4,           /* a kernel or library call failed */
  DLC_ERROR_INTERNAL = 5,
  DLC_ERROR_IO = 6,
  DLC_ERROR_DATA = 7, /* the input data is invalid for the model (an index out of range) */
  DLC_STATUS_FORCE_INT32_ = -0x7fffffff - 1
} dlc_status;

/* The *_FORCE_INT32_ entries (INT_MIN) are not values: they give every enum the whole
   32-bit int range, so any int a caller passes is a defined value of the type that the
   runtime checks and rejects, and the enums' size never depends on the compiler. */
typedef enum dlc_device {
  DLC_DEVICE_AUTO = 0,
  DLC_DEVICE_CUDA = 1,
  DLC_DEVICE_EMU = 2,
  DLC_DEVICE_FORCE_INT32_ = -0x7fffffff - 1
} dlc_device;

/* Element types, in the order of the package format. */
typedef enum dlc_dtype {
  DLC_F32 = 0,
  DLC_F16 = 1,
  DLC_BF16 = 2,
  DLC_F64 = 3,
  DLC_I64 = 4,
  DLC_I32 = 5,
  DLC_I16 = 6,
  DLC_I8 = 7,
  DLC_U8 = 8,
  DLC_U16 = 9,
  DLC_U32 = 10,
  DLC_U64 = 11,
  DLC_BOOL = 12,
  DLC_F8E4M3 = 13, /* float8 e4m3fn and e5m2: inside a model only, never an input or output */
  DLC_F8E5M2 = 14,
  DLC_DTYPE_FORCE_INT32_ = -0x7fffffff - 1
} dlc_dtype;

typedef struct dlc_tensor_info {
  const char *name;
  dlc_dtype dtype;
  int rank;
  const long *shape; /* rank entries (64-bit on LP64); valid as long as the model lives */
  size_t bytes;      /* size of the dense data */
} dlc_tensor_info;

/* Zero-initialize (memset) for the defaults. */
typedef struct dlc_session_options {
  dlc_device device; /* DLC_DEVICE_AUTO: cuda if a driver and device exist, else emu */
  int emu_threads;   /* worker threads of the emu backend; 0 = one per core */
  int cuda_device;   /* CUDA device ordinal for the cuda backend (default 0) */
  /* Since API version 2 (zero-initialise the struct: 0 is every default). */
  int check;          /* emu: the checks that cost time (memory starts as NaN bytes, ...) */
  int no_cuda_graphs; /* cuda: launch step by step instead of replaying a CUDA graph */
} dlc_session_options;

/* The message of this thread's last failing call ("" if none). */
const char *dlc_last_error(void);
const char *dlc_status_string(dlc_status s);
int dlc_runtime_api_version(void);

dlc_status dlc_model_load_file(const char *path, dlc_model **out);
dlc_status dlc_model_load_memory(const void *data, size_t size, dlc_model **out); /* copies */
/* No copy: data must stay valid and unchanged while the model lives (a package
 * linked into the program, as `dlc compile --emit lib` does). */
dlc_status dlc_model_load_static(const void *data, size_t size, dlc_model **out);
void dlc_model_free(dlc_model *model); /* after every session of the model is freed */
dlc_status dlc_model_num_inputs(const dlc_model *model, int *count);
dlc_status dlc_model_num_outputs(const dlc_model *model, int *count);
dlc_status dlc_model_input_info(const dlc_model *model, int index, dlc_tensor_info *info);
dlc_status dlc_model_output_info(const dlc_model *model, int index, dlc_tensor_info *info);

/* options may be NULL (defaults). */
dlc_status dlc_session_create(dlc_model *model, const dlc_session_options *options,
                              dlc_session **out);
/* Since API version 5. As dlc_session_create, and on emu the package's host code (its
 * emu module) runs even when another user or machine compiled it (dlc_session_create
 * refuses such a package). That code runs as you: only for packages from sources you
 * trust. A function of its own, not an options field, so that no caller built against
 * an older, shorter dlc_session_options can give this consent by accident. */
dlc_status dlc_session_create_allowing_host_code(dlc_model *model,
                                                 const dlc_session_options *options,
                                                 dlc_session **out);
/* Since API version 6. Tactics (README: Tactics): which implementation runs each layer
 * that has alternatives. DEFAULT: $DLC_TACTICS, else AUTO; AUTO: on a GPU the fastest,
 * timed when the session starts or read from the tactics cache, on emu ours; DLC: our
 * kernels; VENDOR: cuDNN where a layer has it. */
typedef enum dlc_tactics {
  DLC_TACTICS_DEFAULT = 0,
  DLC_TACTICS_AUTO = 1,
  DLC_TACTICS_DLC = 2,
  DLC_TACTICS_VENDOR = 3,
  DLC_TACTICS_FORCE_INT32_ = 0x7fffffff
} dlc_tactics;
/* As dlc_session_create, with the tactics family forced (a function of its own: callers
 * built against an older dlc_session_options pass the shorter struct). */
dlc_status dlc_session_create_with_tactics(dlc_model *model, const dlc_session_options *options,
                                           dlc_tactics tactics, dlc_session **out);
void dlc_session_free(dlc_session *session);
/* "cuda (NVIDIA A100, sm_80)" or "emu (...)"; valid while the session lives. */
const char *dlc_session_device(const dlc_session *session);

/* Copies host data into an input; size must equal the input's byte size. */
dlc_status dlc_session_set_input(dlc_session *session, const char *name, const void *data,
                                 size_t size);
/* The same, checking the caller's element type and shape against the input's. */
dlc_status dlc_session_set_input_tensor(dlc_session *session, const char *name, dlc_dtype dtype,
                                        const long *shape, int rank, const void *data);
/* cuda backend only: the input (or output) lives at a device pointer that the caller
 * owns (zero copy); it must stay valid until the next run completes. */
dlc_status dlc_session_bind_device_input(dlc_session *session, const char *name,
                                         unsigned long device_ptr);
dlc_status dlc_session_bind_device_output(dlc_session *session, const char *name,
                                          unsigned long device_ptr);
/* cuda backend only: run on the caller's CUstream (cast to a pointer); NULL restores
 * the session's own stream. */
dlc_status dlc_session_set_stream(dlc_session *session, void *cu_stream);
/* Runs the model; every input must have been set or bound. Synchronous. */
dlc_status dlc_session_run(dlc_session *session);
/* Copies an output to host memory; size must equal the output's byte size. */
dlc_status dlc_session_get_output(dlc_session *session, const char *name, void *data, size_t size);

/* Shape ranges (API version 4). A package compiled with ranges (`dlc compile
   --input-shape x=1..32,3,224,224`) takes any input shape inside them, set with
   dlc_session_set_input_tensor; dlc_model_input_info gives the opt shape, and the
   outputs' shapes follow the inputs' at each run. */
/* The bounds of each dimension of input `index` (rank entries each; equal where the
   dimension is fixed). */
dlc_status dlc_model_input_shape_range(const dlc_model *model, int index, long *min_shape,
                                       long *max_shape);
/* The shape of an output at the last run (before any run: at the opt shape); rank must
   be the output's rank (dlc_model_output_info). */
dlc_status dlc_session_output_shape(dlc_session *session, const char *name, long *shape, int rank);
/* An output's byte size is its dtype's size times the product of that shape. */

/* Training (API version 3). A package compiled with `dlc compile --train` runs one
   training step per dlc_session_run: its inputs are the model's and the label, its
   first output the loss, then the model's outputs. Its variables (the trainable
   parameters, optimizer state and running statistics) belong to each session and
   start at the package's values. */
dlc_status dlc_model_num_variables(const dlc_model *model, int *count);
/* trainable: 1 for a trainable parameter, 0 for optimizer or model state. */
dlc_status dlc_model_variable_info(const dlc_model *model, int index, dlc_tensor_info *info,
                                   int *trainable);
/* The step without its updates: the loss and predictions, no variable changes. */
dlc_status dlc_session_evaluate(dlc_session *session);
/* size must equal the variable's byte size; dtype and shape are the variable's. */
dlc_status dlc_session_get_variable(dlc_session *session, const char *name, void *data,
                                    size_t size);
dlc_status dlc_session_set_variable(dlc_session *session, const char *name, const void *data,
                                    size_t size);
dlc_status dlc_session_reset_variables(dlc_session *session);
/* Every variable to an .npz file (written atomically), and back (all or nothing). */
dlc_status dlc_session_save_checkpoint(dlc_session *session, const char *path);
dlc_status dlc_session_load_checkpoint(dlc_session *session, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* DLC_RUNTIME_H */
