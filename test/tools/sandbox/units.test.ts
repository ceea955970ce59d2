import { describe, expect, it } from 'vitest'
import { limitReached, prlimitArgs } from '../../../src/tools/sandbox/limits.js'
import { REFUSED_SYSCALLS, seccompFilter, seccompSupported } from '../../../src/tools/sandbox/seccomp.js'

const LIMITS = { memory_mb: 100, processes: 10, file_size_mb: 2, open_files: 50, cpu_seconds: 7 }

describe('the seccomp program', () => {
  it('is whole sock_filter instructions, checks the architecture first, and ends by allowing or refusing', () => {
    for (const arch of ['x64', 'arm64']) {
      const f = seccompFilter(arch)
      expect(f.length % 8).toBe(0)
      // ld [4] (the architecture), then jeq AUDIT_ARCH_*, then ret KILL_PROCESS for any other.
      expect([f.readUInt16LE(0), f.readUInt32LE(4)]).toEqual([0x20, 4])
      expect(f.readUInt32LE(12)).toBe(arch === 'x64' ? 0xc000003e : 0xc00000b7)
      expect([f.readUInt16LE(16), f.readUInt32LE(20)]).toEqual([0x06, 0x80000000])
      // The last instruction returns EPERM; every jump lands inside the program.
      expect(f.readUInt32LE(f.length - 4)).toBe(0x00050001)
      for (let i = 0; i < f.length; i += 8) {
        if ((f.readUInt16LE(i) & 0x07) !== 0x05) continue
        const [jt, jf] = [f.readUInt8(i + 2), f.readUInt8(i + 3)]
        expect(i / 8 + 1 + Math.max(jt, jf)).toBeLessThan(f.length / 8)
      }
    }
    expect(REFUSED_SYSCALLS).toEqual(
      expect.arrayContaining([
        'mount',
        'umount2',
        'pivot_root',
        'ptrace',
        'kexec_load',
        'kexec_file_load',
        'init_module',
        'finit_module',
        'delete_module',
        'bpf',
        'keyctl',
        'add_key',
        'request_key',
        'perf_event_open',
        'io_uring_setup',
        'io_uring_enter',
        'io_uring_register',
      ]),
    )
  })

  it('has none for another architecture: the sandbox is refused rather than run without one', () => {
    expect(seccompSupported('ia32')).toBe(false)
    expect(() => seccompFilter('ia32')).toThrow('no seccomp filter for the ia32 architecture')
  })
})

describe('limits', () => {
  it('are set soft and hard alike through prlimit (CPU time: the hard limit a second later)', () => {
    expect(prlimitArgs(LIMITS)).toEqual([
      '/usr/bin/prlimit',
      `--data=${100 * 1024 * 1024}`,
      '--nproc=10',
      `--fsize=${2 * 1024 * 1024}`,
      '--nofile=50',
      '--cpu=7:8',
      '--',
    ])
  })

  it('say which one was reached', () => {
    expect(limitReached(LIMITS, 'SIGXCPU', '')).toBe('CPU time limit (tools.limits.cpu_seconds = 7) reached')
    expect(limitReached(LIMITS, null, 'sh: 1: CPU time limit exceeded')).toBe('CPU time limit (tools.limits.cpu_seconds = 7) reached')
    expect(limitReached(LIMITS, 'SIGXFSZ', '')).toBe('file size limit (tools.limits.file_size_mb = 2) reached')
    for (const out of ['bash: fork: retry: Resource temporarily unavailable', 'malloc: Cannot allocate memory', 'Out of memory!'])
      expect(limitReached(LIMITS, null, out)).toContain('memory 100 MB (tools.limits.memory_mb), 10 processes and threads (tools.limits.processes)')
    expect(limitReached(LIMITS, null, 'all 12 tests passed')).toBeNull()
    expect(limitReached(LIMITS, 'SIGKILL', '')).toBeNull()
  })
})
