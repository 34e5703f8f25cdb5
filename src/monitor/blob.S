/* The monitor program (main.c, built as src/monitor/local.mk says), embedded. */
        .section .rodata
        .balign 16
        .global monitor_program
        .global monitor_program_end
monitor_program:
        .incbin "src/monitor/kinglet-monitor"
monitor_program_end:
        .section .note.GNU-stack,"",%progbits
