package pkg_test

import "fmt"

func setup() func() { return func() {} }

func ExampleShown() {
	stop := setup() //docs:hide
	defer stop()    //docs:hide
	fmt.Println("hello")
	// Output: hello
}

func ExampleCompiledOnly() {
	fmt.Println("not run")
}

// greeter says hello.
type greeter struct{}

func (greeter) Hello() string { return "hello" }

func (*greeter) Bye() string { return "bye" }

func ExampleTildes() {
	fmt.Print(`a
~~~
`)
	// Output:
	// a
	// ~~~
}
