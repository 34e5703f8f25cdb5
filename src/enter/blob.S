/* The exec helper program (main.c, built static against musl), embedded. */
        .section .rodata
        .balign 16
        .global enter_program
        .global enter_program_end
enter_program:
        .incbin "src/enter/kinglet-enter"
enter_program_end:
        .section .note.GNU-stack,"",%progbits
