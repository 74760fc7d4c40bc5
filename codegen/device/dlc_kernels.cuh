// The dlc kernel library: templated device kernels with run-time extents. Generated
// code includes this header, defines the fused element-wise functors, and
// instantiates the templates; one instantiation serves every layer with the same
// template arguments. Compiled by NVRTC for the GPU and by the host compiler (with
// dlc_emu_prelude.h) for emu.
#pragma once

#include "dlc_attention.cuh"
#include "dlc_conv.cuh"
#include "dlc_conv_mma.cuh"
#include "dlc_device.cuh"
#include "dlc_elementwise.cuh"
#include "dlc_movement.cuh"
#include "dlc_norm.cuh"
#include "dlc_pool.cuh"
#include "dlc_quant.cuh"
#include "dlc_reduce.cuh"
#include "dlc_rnn.cuh"
