/* The pod init program (init_main.c, built static against musl), embedded. */
        .section .rodata
        .balign 16
        .global pod_init_program
        .global pod_init_program_end
pod_init_program:
        .incbin "src/pod/kinglet-pod-init"
pod_init_program_end:
        .section .note.GNU-stack,"",%progbits
