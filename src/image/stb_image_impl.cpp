// The one translation unit that compiles stb_image (Debian libstb-dev): PNG and JPEG only,
// decoding from memory only (files are read through the bounded reader first). Not an API:
// decode.cpp is the only caller.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_FAILURE_USERMSG
#include <stb/stb_image.h>
