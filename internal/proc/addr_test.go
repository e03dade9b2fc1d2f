package proc

import "reflect"

func funcAddr() uintptr { return reflect.ValueOf(funcAddr).Pointer() }
