//! The embedded example's program. On a bare-metal Cortex-M
//! (`thumbv7em-none-eabihf`, run under QEMU's `mps2-an386`): cortex-m-rt's
//! reset handler (which paints the stack), the checks of the library with
//! their output on the host through semihosting, and a semihosting exit
//! whose status is the result (a failed check, a panic or a fault exits
//! with a failure). Anywhere else: the same checks as a plain program.

#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

#[cfg(all(target_os = "none", not(target_arch = "arm")))]
compile_error!(
    "the bare-metal program is written for a Cortex-M (cortex-m-rt, Arm semihosting); \
     on another bare-metal target build the checks alone: \
     cargo build -p fused-embedded --lib --target <target>"
);

#[cfg(all(target_arch = "arm", target_os = "none"))]
mod bare {
    use core::fmt::{self, Write};

    use cortex_m_rt::{ExceptionFrame, STACK_PAINT_VALUE, entry, exception};
    use cortex_m_semihosting::debug::{self, EXIT_FAILURE, EXIT_SUCCESS};
    use cortex_m_semihosting::hio::{self, HostStream};
    use fused_embedded::{Board, Usage};

    /// Semihosting's stdout (output is dropped if the host has none).
    struct Out(Option<HostStream>);

    impl Write for Out {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            match &mut self.0 {
                Some(h) => h.write_str(s),
                None => Ok(()),
            }
        }
    }

    fn out() -> Out {
        Out(hio::hstdout().ok())
    }

    /// Ends the program through semihosting (QEMU exits with 0 or 1).
    fn exit(ok: bool) -> ! {
        debug::exit(if ok { EXIT_SUCCESS } else { EXIT_FAILURE });
        // Without a semihosting host the exit returns: stop here.
        loop {
            cortex_m_rt_wfi();
        }
    }

    /// Waits for an interrupt (none comes: the program is over).
    fn cortex_m_rt_wfi() {
        // SAFETY: `wfi` only halts the core until an interrupt; it touches
        // no memory and no register Rust relies on.
        unsafe { core::arch::asm!("wfi", options(nomem, nostack, preserves_flags)) };
    }

    unsafe extern "C" {
        /// The lowest address of the stack (cortex-m-rt's linker script).
        static _stack_end: u32;
        /// One past the highest address of the stack.
        static _stack_start: u32;
    }

    /// The stack's lowest address.
    fn stack_end() -> usize {
        // Only the symbol's address is taken, never its value.
        core::ptr::addr_of!(_stack_end) as usize
    }

    /// The stack's top (exclusive).
    fn stack_start() -> usize {
        core::ptr::addr_of!(_stack_start) as usize
    }

    /// The current stack pointer.
    #[inline(always)]
    fn sp() -> usize {
        let sp: usize;
        // SAFETY: reads the stack pointer into a register; no memory access.
        unsafe {
            core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
        };
        sp
    }

    /// The lowest word in `from..to` no longer holding the paint value, or
    /// `to` if none was touched.
    fn lowest_touched(from: usize, to: usize) -> usize {
        let mut a = from;
        while a < to {
            // SAFETY: `from..to` lies in the stack region of the linker
            // script (RAM), word-aligned; a volatile read of it has no
            // effect but the read.
            if unsafe { core::ptr::read_volatile(a as *const u32) } != STACK_PAINT_VALUE {
                return a;
            }
            a += 4;
        }
        to
    }

    /// Measures a call's stack by painting the free stack below the
    /// stack pointer and looking, afterwards, for the lowest word the call
    /// overwrote. The figure includes the frames of the two closures that
    /// carry the call (a few dozen bytes). `lowest` keeps the lowest word
    /// any call reached, for the whole program's figure.
    struct PaintProbe {
        lowest: usize,
    }

    /// SysTick's current value register (counts down, 24 bits).
    const SYST_CVR: usize = 0xe000_e018;

    /// Starts SysTick free-running on the processor clock, no interrupt.
    fn systick_start() {
        // SAFETY: SysTick's control (0xE000_E010), reload (…14) and current
        // value (…18) registers, part of every Armv7-M core's System
        // Control Space; nothing else in the program uses SysTick.
        unsafe {
            core::ptr::write_volatile(0xe000_e014 as *mut u32, 0x00ff_ffff);
            core::ptr::write_volatile(SYST_CVR as *mut u32, 0);
            core::ptr::write_volatile(0xe000_e010 as *mut u32, 0b101);
        }
    }

    /// SysTick's current value.
    fn systick() -> u32 {
        // SAFETY: a read of SysTick's current value register (see
        // `systick_start`).
        unsafe { core::ptr::read_volatile(SYST_CVR as *const u32) }
    }

    impl Board for PaintProbe {
        #[inline(never)]
        fn measure(&mut self, f: &mut dyn FnMut()) -> Usage {
            let top = sp() & !3;
            let bottom = (stack_end() + 3) & !3;
            let mut a = bottom;
            while a < top {
                // SAFETY: `bottom..top` is stack memory below the current
                // stack pointer (and a margin): no live frame and no Rust
                // object is there, and interrupts are not enabled, so
                // nothing else writes it. Word-aligned, in RAM.
                unsafe { core::ptr::write_volatile(a as *mut u32, STACK_PAINT_VALUE) };
                a += 4;
            }
            let t0 = systick();
            f();
            let t1 = systick();
            let low = lowest_touched(bottom, top);
            self.lowest = self.lowest.min(low);
            // Ticks elapsed (SysTick counts down and wraps at 2^24); one
            // per 25 MHz processor clock of the board, which QEMU runs at
            // 1 GHz of instructions under `-icount shift=0`: 40 a tick.
            let ticks = t0.wrapping_sub(t1) & 0x00ff_ffff;
            Usage {
                stack: Some(top - low),
                instructions: Some(u64::from(ticks) * 40),
            }
        }
    }

    #[entry]
    fn main() -> ! {
        let mut out = out();
        let _ = writeln!(
            out,
            "fused-embedded on {} (ISA {}), stack {} KiB",
            env!("TARGET_TRIPLE"),
            fused_cpu::Isa::detect(),
            (stack_start() - stack_end()) / 1024
        );
        systick_start();
        let mut probe = PaintProbe {
            lowest: stack_start(),
        };
        let report = fused_embedded::run(&mut out, &mut probe);
        // The whole program, reset handler to here: cortex-m-rt painted the
        // stack before `main`, and each probe painted anew below its stack
        // pointer, so the deepest word is the lower of the probes' and what
        // the paint shows now.
        let low = lowest_touched(stack_end(), stack_start()).min(probe.lowest);
        let used = stack_start() - low;
        let _ = writeln!(
            out,
            "stack: {} B at most in one fused-cpu call, {used} B for the whole program",
            report.max_stack.unwrap_or(0)
        );
        exit(report.failed == 0)
    }

    #[exception]
    unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
        let _ = writeln!(
            out(),
            "FAULT: HardFault, pc {:#010x}, lr {:#010x}",
            ef.pc(),
            ef.lr()
        );
        exit(false)
    }

    #[exception]
    unsafe fn DefaultHandler(irqn: i16) {
        let _ = writeln!(out(), "FAULT: unexpected exception {irqn}");
        exit(false)
    }

    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
        let _ = writeln!(out(), "PANIC: {info}");
        exit(false)
    }
}

#[cfg(not(target_os = "none"))]
fn main() -> std::process::ExitCode {
    let mut out = String::new();
    let report = fused_embedded::run(&mut out, &mut fused_embedded::NoProbe);
    print!("{out}");
    if report.failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
