/* libFuzzer target: the daemon configuration loader (daemon/config.c config_load_text). */
#include "tests/fuzz/fuzz_common.h"
#include "daemon/config.h"
#include "engine/base/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *s = fz_cstr(data, size);
    if (!s)
        return 0;
    tess_config c;
    char err[512];
    err[0] = '\0';
    if (config_init(&c) == 0) {
        int rc = config_load_text(s, &c, err, sizeof err);
        if (rc == 0) {
            if (c.max_connections < 1 || !c.listen_addr || c.port < 0 || c.port > 65535)
                __builtin_trap();
            config_release(&c);
        } else if (strnlen(err, sizeof err) == sizeof err) {
            __builtin_trap();
        }
    }
    free(s);
    return 0;
}
