/* client.h: the client (see client.c); its shared state is state.h. */
#ifndef REDLOCK_CLIENT_H
#define REDLOCK_CLIENT_H

#include <uv.h>

#include "state.h"

/* redlock_client_new over another seam (sys.h) than libuv's on `loop`. */
int redlock__client_new_sys(uv_loop_t *loop, redlock__sys *sys,
                            const redlock_client_config *cfg,
                            redlock_client_t **out);

#endif
