/* Context switch for x86-64 (System V). Saves the callee-saved registers,
 * the SSE control/status word and the x87 control word on the current stack,
 * stores the stack pointer in *from, loads *to, and restores the same set.
 * No system call and no signal mask: that is what makes it ~ns, not ~us.
 *
 *   void sh_ctx_switch(void **from_sp, void *to_sp);
 *   void sh_ctx_start(void **from_sp, void *top, void *arg, void (*fn)(void *));
 *     saves like sh_ctx_switch, then runs fn(arg) on the stack ending at
 *     top (16-byte aligned); fn never returns. A new fiber needs no frame
 *     prepared on its stack, so creating one touches none of its pages.
 */
/* Pushes the callee-saved state and stores the stack pointer in *%rdi. */
	.macro SAVE_CONTEXT
	pushq	%rbp
	pushq	%rbx
	pushq	%r12
	pushq	%r13
	pushq	%r14
	pushq	%r15
	subq	$8, %rsp
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
	movq	%rsp, (%rdi)
	.endm

	.text
	.globl	sh_ctx_switch
	.hidden	sh_ctx_switch
	.type	sh_ctx_switch, @function
	.p2align 4
sh_ctx_switch:
	.cfi_startproc
	SAVE_CONTEXT
	movq	%rsi, %rsp
	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
	addq	$8, %rsp
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbx
	popq	%rbp
	ret
	.cfi_endproc
	.size	sh_ctx_switch, .-sh_ctx_switch

	.globl	sh_ctx_start
	.hidden	sh_ctx_start
	.type	sh_ctx_start, @function
	.p2align 4
sh_ctx_start:
	.cfi_startproc
	SAVE_CONTEXT
	movq	%rsi, %rsp
	movq	%rdx, %rdi
	xorl	%ebp, %ebp
	callq	*%rcx
	ud2
	.cfi_endproc
	.size	sh_ctx_start, .-sh_ctx_start

	.section .note.GNU-stack,"",@progbits
