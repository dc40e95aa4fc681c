/* Tensor element types: sizes and the names safetensors files spell them
 * with. The table order is the shoal_dtype enum order. */
#include "shoal_impl.h"

#include <string.h>

#include <shoal/store.h>

static const struct {
	const char *name;
	uint8_t size;
} dtypes[SHOAL_DT_COUNT] = {
	[SHOAL_DT_INVALID] = {"?", 0},	     [SHOAL_DT_BOOL] = {"BOOL", 1},
	[SHOAL_DT_U8] = {"U8", 1},	     [SHOAL_DT_I8] = {"I8", 1},
	[SHOAL_DT_U16] = {"U16", 2},	     [SHOAL_DT_I16] = {"I16", 2},
	[SHOAL_DT_F16] = {"F16", 2},	     [SHOAL_DT_BF16] = {"BF16", 2},
	[SHOAL_DT_U32] = {"U32", 4},	     [SHOAL_DT_I32] = {"I32", 4},
	[SHOAL_DT_F32] = {"F32", 4},	     [SHOAL_DT_U64] = {"U64", 8},
	[SHOAL_DT_I64] = {"I64", 8},	     [SHOAL_DT_F64] = {"F64", 8},
	[SHOAL_DT_F8_E4M3] = {"F8_E4M3", 1}, [SHOAL_DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t shoal_dtype_size(shoal_dtype dt)
{
	return (unsigned)dt < SHOAL_DT_COUNT ? dtypes[dt].size : 0;
}

const char *shoal_dtype_name(shoal_dtype dt)
{
	return (unsigned)dt < SHOAL_DT_COUNT ? dtypes[dt].name : "?";
}

shoal_dtype shoal_dtype_from_name(const char *name, size_t len)
{
	for (int i = 1; i < SHOAL_DT_COUNT; i++)
		if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0)
			return (shoal_dtype)i;
	return SHOAL_DT_INVALID;
}
