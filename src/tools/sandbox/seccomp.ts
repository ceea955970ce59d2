/*
 * The seccomp filter every sandboxed process runs under, as a classic BPF program
 * (struct sock_filter[]) for bwrap's `--seccomp FD`. No seccomp library is at hand, so it
 * is written out here: a handful of instructions, read top to bottom.
 *
 *   1. A syscall from another architecture (i386 through int 0x80 on x86_64, arm32 on
 *      arm64) has other numbers: killed, so that no number below can be dodged.
 *   2. x32-ABI syscalls (bit 30 of the number on x86_64): refused.
 *   3. The syscalls that change mounts, load code into the kernel, watch or trace other
 *      processes, or reach the kernel keyring: EPERM.
 *   4. io_uring (io_uring_setup, io_uring_enter, io_uring_register): EPERM, as container
 *      runtimes' default profiles do after a run of kernel escapes through it; programs
 *      fall back to ordinary system calls.
 *   5. socket() of a family other than Unix, IPv4 and IPv6 (netlink, packet, vsock, which
 *      reaches a VM's hypervisor host, …): EAFNOSUPPORT, as a kernel without it answers.
 *   6. A new user namespace (unshare or clone with CLONE_NEWUSER) would give back every
 *      capability inside it: EPERM. clone3 passes its flags in memory a filter cannot
 *      read, so it answers ENOSYS and libc falls back to clone (as flatpak does).
 *   7. Everything else: allowed.
 */

// <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h>
const RET_ALLOW = 0x7fff0000
const RET_ERRNO = 0x00050000
const RET_KILL_PROCESS = 0x80000000
const EPERM = 1
const ENOSYS = 38
const EAFNOSUPPORT = 97
const LD_W_ABS = 0x20 // BPF_LD | BPF_W | BPF_ABS
const JEQ_K = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K = 0x35 // BPF_JMP | BPF_JGE | BPF_K
const JSET_K = 0x45 // BPF_JMP | BPF_JSET | BPF_K
const RET_K = 0x06 // BPF_RET | BPF_K
const X32_SYSCALL_BIT = 0x40000000
const CLONE_NEWUSER = 0x10000000
// <linux/socket.h>: the socket families a command may open.
export const ALLOWED_FAMILIES = { AF_UNIX: 1, AF_INET: 2, AF_INET6: 10 } as const
// struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian: args[0]'s low word at 16).
const NR = 0
const ARCH = 4
const ARG0_LOW = 16

type Refused =
  | 'mount'
  | 'umount2'
  | 'pivot_root'
  | 'ptrace'
  | 'kexec_load'
  | 'kexec_file_load'
  | 'init_module'
  | 'finit_module'
  | 'delete_module'
  | 'bpf'
  | 'keyctl'
  | 'add_key'
  | 'request_key'
  | 'perf_event_open'
  | 'setns'
  | 'open_tree'
  | 'move_mount'
  | 'fsopen'
  | 'fsconfig'
  | 'fsmount'
  | 'fspick'
  | 'mount_setattr'
  | 'io_uring_setup'
  | 'io_uring_enter'
  | 'io_uring_register'

interface Arch {
  audit: number
  /** x86_64 has the x32 ABI to refuse; arm64 has none. */
  x32: boolean
  refused: Record<Refused, number>
  unshare: number
  clone: number
  clone3: number
  socket: number
}

// Numbers from <asm/unistd_64.h> (x86_64) and <asm-generic/unistd.h> (arm64). The new mount API (open_tree … mount_setattr) and io_uring share numbers on both.
const generic = {
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  mount_setattr: 442,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
}
const ARCHES: Record<string, Arch> = {
  x64: {
    audit: 0xc000003e, // AUDIT_ARCH_X86_64
    x32: true,
    refused: {
      mount: 165,
      umount2: 166,
      pivot_root: 155,
      ptrace: 101,
      kexec_load: 246,
      kexec_file_load: 320,
      init_module: 175,
      finit_module: 313,
      delete_module: 176,
      bpf: 321,
      keyctl: 250,
      add_key: 248,
      request_key: 249,
      perf_event_open: 298,
      setns: 308,
      ...generic,
    },
    unshare: 272,
    clone: 56,
    clone3: 435,
    socket: 41,
  },
  arm64: {
    audit: 0xc00000b7, // AUDIT_ARCH_AARCH64
    x32: false,
    refused: {
      mount: 40,
      umount2: 39,
      pivot_root: 41,
      ptrace: 117,
      kexec_load: 104,
      kexec_file_load: 294,
      init_module: 105,
      finit_module: 273,
      delete_module: 106,
      bpf: 280,
      keyctl: 219,
      add_key: 217,
      request_key: 218,
      perf_event_open: 241,
      setns: 268,
      ...generic,
    },
    unshare: 97,
    clone: 220,
    clone3: 435,
    socket: 198,
  },
}

/** The syscalls refused with EPERM, by name (for doctor and the docs). */
export const REFUSED_SYSCALLS: readonly string[] = Object.keys(ARCHES.x64?.refused ?? {})

/** Whether this machine's architecture has a filter (x86_64 and arm64 do). */
export function seccompSupported(arch: string = process.arch): boolean {
  return arch in ARCHES
}

/** The filter for `arch` (Node's process.arch) as bytes for bwrap --seccomp; throws for an architecture without one. */
export function seccompFilter(arch: string = process.arch): Buffer {
  const a = ARCHES[arch]
  if (a === undefined) throw new Error(`no seccomp filter for the ${arch} architecture (x64 and arm64 have one)`)
  const p: [number, number, number, number][] = []
  const ins = (code: number, k: number, jt = 0, jf = 0) => void p.push([code, jt, jf, k])
  // Jump targets are relative and resolved once the program's length is known: refs to the shared endings.
  const toEperm: number[] = []
  const jumpIfEq = (k: number, endings: number[]) => {
    endings.push(p.length)
    ins(JEQ_K, k)
  }

  ins(LD_W_ABS, ARCH)
  ins(JEQ_K, a.audit, 1, 0)
  ins(RET_K, RET_KILL_PROCESS)
  ins(LD_W_ABS, NR)
  if (a.x32) {
    toEperm.push(p.length)
    ins(JGE_K, X32_SYSCALL_BIT)
  }
  for (const nr of Object.values(a.refused)) jumpIfEq(nr, toEperm)
  // socket(): its family (args[0]) one of the allowed, else EAFNOSUPPORT; other syscalls skip the 6 instructions.
  ins(JEQ_K, a.socket, 0, 6)
  ins(LD_W_ABS, ARG0_LOW)
  ins(JEQ_K, ALLOWED_FAMILIES.AF_UNIX, 3, 0)
  ins(JEQ_K, ALLOWED_FAMILIES.AF_INET, 2, 0)
  ins(JEQ_K, ALLOWED_FAMILIES.AF_INET6, 1, 0)
  ins(RET_K, RET_ERRNO | EAFNOSUPPORT)
  ins(RET_K, RET_ALLOW)
  // clone3 → ENOSYS
  ins(JEQ_K, a.clone3, 0, 1)
  ins(RET_K, RET_ERRNO | ENOSYS)
  // unshare or clone: look at the flags (args[0]) for CLONE_NEWUSER.
  ins(JEQ_K, a.unshare, 1, 0)
  ins(JEQ_K, a.clone, 0, 3)
  ins(LD_W_ABS, ARG0_LOW)
  toEperm.push(p.length)
  ins(JSET_K, CLONE_NEWUSER)
  ins(RET_K, RET_ALLOW)
  ins(RET_K, RET_ALLOW)
  const eperm = p.length
  ins(RET_K, RET_ERRNO | EPERM)

  for (const at of toEperm) {
    const jump = p[at]
    if (jump !== undefined) jump[1] = eperm - at - 1
  }
  const out = Buffer.alloc(p.length * 8)
  p.forEach(([code, jt, jf, k], i) => {
    out.writeUInt16LE(code, i * 8)
    out.writeUInt8(jt, i * 8 + 2)
    out.writeUInt8(jf, i * 8 + 3)
    out.writeUInt32LE(k >>> 0, i * 8 + 4)
  })
  return out
}
