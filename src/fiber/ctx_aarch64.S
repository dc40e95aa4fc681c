/* Context switch for AArch64 (AAPCS64): saves x19-x30 and d8-d15 on the
 * current stack, stores sp in *from, loads *to, restores, returns through
 * x30.
 *
 *   void sh_ctx_switch(void **from_sp, void *to_sp);
 *   void sh_ctx_start(void **from_sp, void *top, void *arg, void (*fn)(void *));
 *     saves the same way, then calls fn(arg) on a fresh stack ending at top.
 */
/* Pushes the callee-saved state (x19-x30, d8-d15) below sp. */
	.macro SAVE_CONTEXT
	sub	sp, sp, #176
	stp	x19, x20, [sp, #0]
	stp	x21, x22, [sp, #16]
	stp	x23, x24, [sp, #32]
	stp	x25, x26, [sp, #48]
	stp	x27, x28, [sp, #64]
	stp	x29, x30, [sp, #80]
	stp	d8, d9, [sp, #96]
	stp	d10, d11, [sp, #112]
	stp	d12, d13, [sp, #128]
	stp	d14, d15, [sp, #144]
	.endm

	.text
	.globl	sh_ctx_switch
	.hidden	sh_ctx_switch
	.type	sh_ctx_switch, %function
	.p2align 4
sh_ctx_switch:
	SAVE_CONTEXT
	mov	x2, sp
	str	x2, [x0]
	mov	sp, x1
	ldp	x19, x20, [sp, #0]
	ldp	x21, x22, [sp, #16]
	ldp	x23, x24, [sp, #32]
	ldp	x25, x26, [sp, #48]
	ldp	x27, x28, [sp, #64]
	ldp	x29, x30, [sp, #80]
	ldp	d8, d9, [sp, #96]
	ldp	d10, d11, [sp, #112]
	ldp	d12, d13, [sp, #128]
	ldp	d14, d15, [sp, #144]
	add	sp, sp, #176
	ret
	.size	sh_ctx_switch, .-sh_ctx_switch

	.globl	sh_ctx_start
	.hidden	sh_ctx_start
	.type	sh_ctx_start, %function
	.p2align 4
sh_ctx_start:
	SAVE_CONTEXT
	mov	x4, sp
	str	x4, [x0]
	mov	sp, x1
	mov	x0, x2
	mov	x29, #0
	mov	x30, #0
	blr	x3
	brk	#0
	.size	sh_ctx_start, .-sh_ctx_start

	.section .note.GNU-stack,"",%progbits
