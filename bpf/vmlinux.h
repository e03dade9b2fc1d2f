/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Kernel types of the target architecture, which bpf2go's -target names
 * (-D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64). Field accesses are CO-RE
 * relocated, so one header per architecture serves every kernel version;
 * what differs between architectures (pt_regs, thread_struct) cannot be
 * relocated and lives in arch.h.
 *
 * vmlinux_x86.h: BTF of an x86_64 kernel. vmlinux_arm64.h: BTF of
 * Debian 12's linux-image-6.12.117+deb12-cloud-arm64, found in the package's
 * Image by its header and dumped with `bpftool btf dump file X format c`. */
#if defined(__TARGET_ARCH_x86)
#include "vmlinux_x86.h"
#elif defined(__TARGET_ARCH_arm64)
#include "vmlinux_arm64.h"
#else
#error "unsupported target architecture: build with bpf2go -target amd64 or arm64"
#endif
