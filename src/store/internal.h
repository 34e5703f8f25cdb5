/* Private to src/store: what the record kinds share. */
#pragma once

#include "store/store.h"
